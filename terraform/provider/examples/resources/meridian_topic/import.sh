# by full name, <tenant>.<name>
terraform import meridian_topic.orders acme.orders
