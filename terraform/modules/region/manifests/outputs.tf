output "manifests" {
  description = "Every Kubernetes object of the region, by a stable key."
  value       = merge(local.namespace, local.rbac, local.controller, local.brokers, local.network)
}

output "broker_services" {
  description = "Per cluster, its brokers' headless Service: broker N answers at broker-<cluster>-<N-1>.<service>, gRPC on 9092 and Kafka on 9093, inside the Kubernetes cluster."
  value       = { for name, _ in var.clusters : name => "broker-${name}.${var.namespace}.svc" }
}
