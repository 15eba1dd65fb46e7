resource "meridian_mirror" "orders_us" {
  tenant        = "acme"
  name          = "orders-us"
  source_region = "eu-west"
  target_region = "us-east"
  direction     = "two-way"
  topics        = [meridian_topic.orders.name]
}
