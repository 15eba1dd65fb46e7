resource "meridian_member" "alice" {
  tenant   = "acme"
  username = "alice"
  email    = "alice@acme.example"
  role     = "tenant-admin"
}
