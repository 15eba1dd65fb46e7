# by <tenant>/<name>
terraform import meridian_index.by_customer acme/by-customer
