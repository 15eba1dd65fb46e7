# by <tenant>/<name>
terraform import meridian_mirror.orders_us acme/orders-us
