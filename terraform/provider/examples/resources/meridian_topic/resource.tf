resource "meridian_topic" "orders" {
  tenant             = "acme"
  name               = "orders"
  partitions         = 12
  replication_factor = 3
  retention_ms       = 604800000 # 7 days
  durability         = "interval"
}
