data "meridian_regions" "all" {}

output "regions" {
  value = data.meridian_regions.all.names
}
