output "manifests" {
  description = "Every Kubernetes object of the region, by a stable key."
  value       = merge(local.namespace, local.rbac, local.controller, local.brokers, local.network)
}

output "broker_addresses" {
  description = "Per cluster, its brokers' gRPC addresses (stable DNS names), as the control plane records them."
  value = {
    for name, cluster in var.clusters : name => [
      for ordinal in range(cluster.broker_count) : "broker-${name}-${ordinal}.broker-${name}.${var.namespace}.svc:${local.broker_port}"
    ]
  }
}
