resource "meridian_lane" "ppe" {
  tenant        = "acme"
  name          = "ppe"
  topics        = [meridian_topic.orders.full_name]
  orphan_policy = "trunk"
  ttl_s         = 86400
}
