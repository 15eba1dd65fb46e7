terraform {
  required_providers {
    meridian = {
      source  = "meridian/meridian"
      version = "~> 0.1"
    }
  }
}

# A tenant's own service account (client credentials): the provider gets and renews
# its tokens at the local issuer, or at Keycloak's token_url.
provider "meridian" {
  endpoint      = "https://meridian.example.net"
  client_id     = "acme--terraform"
  client_secret = var.meridian_client_secret
}

variable "meridian_client_secret" {
  type      = string
  sensitive = true
}
