resource "meridian_tenant" "acme" {
  slug        = "acme"
  name        = "Acme Corp"
  home_region = "eu-west"
  regions     = ["us-east"]
}
