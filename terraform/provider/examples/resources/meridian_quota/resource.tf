resource "meridian_quota" "acme" {
  tenant              = meridian_tenant.acme.slug
  max_topics          = 200
  max_partitions      = 2000
  produce_bytes_per_s = 50000000
}
