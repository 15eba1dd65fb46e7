resource "meridian_index" "by_customer" {
  tenant      = "acme"
  name        = "by-customer"
  description = "orders by customer"
  topic       = meridian_topic.history.full_name # a topic with remote_storage = true
  fields      = [{ name = "customer", path = "customer.id", type = "string" }]
}
