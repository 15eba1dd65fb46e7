output "manifests" {
  description = "Every Kubernetes object of the control plane, by a stable key."
  value       = merge(local.namespace, local.service_account, local.deployments, local.api, local.backing_objects, local.keycloak, local.network)
}

output "api_url" {
  description = "The control plane's public URL (the provider's endpoint)."
  value       = "https://${var.api.host}"
}
