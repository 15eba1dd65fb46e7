output "api_url" {
  description = "The control plane's public URL: the Meridian provider's endpoint."
  value       = module.manifests.api_url
}

output "namespace" {
  description = "The control plane's namespace."
  value       = var.namespace
}

output "objects" {
  description = "The keys of the Kubernetes objects applied."
  value       = sort(keys(module.manifests.manifests))
}
