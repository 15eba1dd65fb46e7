# by <tenant>/<name>
terraform import meridian_export.orders_parquet acme/orders-parquet
