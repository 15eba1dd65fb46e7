resource "meridian_databus_config" "checkout" {
  tenant      = "acme"
  name        = "checkout"
  description = "the checkout service's streams"
  document = jsonencode({
    streams = {
      orders = { topic = meridian_topic.orders.full_name, linger_ms = 20, compression = "zstd" }
    }
  })
}
