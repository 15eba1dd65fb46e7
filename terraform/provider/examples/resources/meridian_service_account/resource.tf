resource "meridian_service_account" "billing" {
  tenant      = "acme"
  name        = "billing"
  role        = "developer"
  description = "the billing service"
}

# The secret, set once at creation (the state holds it: keep the state private).
output "billing_secret" {
  value     = meridian_service_account.billing.client_secret
  sensitive = true
}
