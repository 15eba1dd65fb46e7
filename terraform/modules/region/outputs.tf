output "namespace" {
  description = "The region's namespace."
  value       = var.namespace
}

output "broker_addresses" {
  description = "Per cluster, its brokers' gRPC addresses (stable DNS names), as the control plane records them."
  value       = module.manifests.broker_addresses
}

output "objects" {
  description = "The keys of the Kubernetes objects applied."
  value       = sort(keys(module.manifests.manifests))
}
