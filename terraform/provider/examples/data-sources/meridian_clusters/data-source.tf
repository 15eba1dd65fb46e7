# platform administrators only
data "meridian_clusters" "eu" {
  region = "eu-west"
}

output "brokers" {
  value = flatten([for c in data.meridian_clusters.eu.clusters : c.brokers[*].address])
}
