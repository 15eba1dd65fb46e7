resource "meridian_topic_acl" "billing_reads_orders" {
  topic      = meridian_topic.orders.full_name
  principal  = meridian_service_account.billing.client_id
  operations = ["consume"]
}
