# A tenant's messaging as code: a topic, the service account of the application that
# writes and reads it, and the ACL entry that lets it (and, the topic having an entry
# now, no other non-admin caller).
#
# The provider reads its endpoint and credentials from the environment:
#   MERIDIAN_API_URL (the control plane), and MERIDIAN_TOKEN or MERIDIAN_CLIENT_ID with
#   MERIDIAN_CLIENT_SECRET (a tenant-admin service account, or a platform admin).
# docs/terraform.md shows how to run it against `./dev run`.

terraform {
  required_version = ">= 1.6"
  required_providers {
    meridian = {
      source  = "meridian/meridian"
      version = "~> 0.1"
    }
  }
}

provider "meridian" {}

variable "tenant" {
  description = "The tenant's slug (the demo's is demo)."
  type        = string
  default     = "demo"
}

resource "meridian_topic" "payments" {
  tenant       = var.tenant
  name         = "payments"
  partitions   = 3
  retention_ms = 86400000 # one day
}

resource "meridian_service_account" "payments_app" {
  tenant      = var.tenant
  name        = "payments-app"
  role        = "developer"
  description = "the payments application (managed by Terraform)"
}

resource "meridian_topic_acl" "payments_app" {
  topic      = meridian_topic.payments.full_name
  principal  = meridian_service_account.payments_app.client_id
  operations = ["produce", "consume"]
}

output "topic" {
  value = meridian_topic.payments.full_name
}

output "client_id" {
  value = meridian_service_account.payments_app.client_id
}

output "client_secret" {
  description = "The application's secret (also in the state: keep the state private)."
  value       = meridian_service_account.payments_app.client_secret
  sensitive   = true
}
