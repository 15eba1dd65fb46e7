output "namespace" {
  description = "The region's namespace."
  value       = var.namespace
}

output "broker_services" {
  description = "Per cluster, its brokers' headless Service: broker N answers at broker-<cluster>-<N-1>.<service>, gRPC on 9092 and Kafka on 9093, inside the Kubernetes cluster."
  value       = module.manifests.broker_services
}

output "objects" {
  description = "The keys of the Kubernetes objects applied."
  value       = sort(keys(module.manifests.manifests))
}
