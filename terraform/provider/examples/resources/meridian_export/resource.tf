resource "meridian_export" "orders_parquet" {
  tenant           = "acme"
  name             = "orders-parquet"
  topic            = meridian_topic.history.full_name # a topic with remote_storage = true
  fields           = [{ name = "customer", path = "customer.id", type = "string" }]
  partition_by     = ["date"]
  target_uri       = "s3://acme-lake/orders/"
  schedule_kind    = "interval"
  interval_minutes = 60
}
