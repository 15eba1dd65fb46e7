data "meridian_topics" "acme" {
  tenant = "acme"
}

output "topics" {
  value = data.meridian_topics.acme.names
}
