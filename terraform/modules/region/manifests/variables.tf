variable "region" {
  description = "The region's name in the control plane (lowercase letters, digits and hyphens)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9](-?[a-z0-9])*$", var.region)) && length(var.region) >= 3 && length(var.region) <= 32
    error_message = "region: 3-32 lowercase letters, digits and single hyphens."
  }
}

variable "namespace" {
  description = "The Kubernetes namespace of the region's controllers and brokers."
  type        = string
}

variable "create_namespace" {
  description = "Whether the module makes the namespace (false: it exists)."
  type        = bool
  default     = true
}

variable "image" {
  description = "The image with meridian-platform installed (by digest: repository@sha256:...)."
  type        = string
}

variable "image_pull_policy" {
  description = "The containers' imagePullPolicy."
  type        = string
  default     = "Always"
}

variable "controllers" {
  description = "Controller replicas: one is active (a Postgres advisory lock), the others stand by."
  type        = number
  default     = 2
  validation {
    condition     = var.controllers >= 1 && var.controllers <= 5
    error_message = "controllers: 1 to 5."
  }
}

variable "clusters" {
  description = <<-EOT
    The region's clusters, by name (the control plane's cluster of provisioner "kubernetes"
    with the same name, whose broker count the control plane keeps): brokers of broker_cpu /
    broker_memory, each with a persistent volume of storage_size in storage_class (null: the
    default class; both fixed once the cluster's StatefulSet exists); the object store of
    tiered storage (remote_store_uri, and the Secret whose key "options.json" holds its fsspec
    options, e.g. credentials).
  EOT
  type = map(object({
    broker_cpu                  = optional(string, "2")
    broker_memory               = optional(string, "4Gi")
    storage_size                = optional(string, "100Gi")
    storage_class               = optional(string)
    remote_store_uri            = optional(string, "")
    remote_store_options_secret = optional(string)
  }))
  validation {
    condition     = length(var.clusters) > 0 && alltrue([for name, c in var.clusters : can(regex("^[a-z0-9](-?[a-z0-9])*$", name))])
    error_message = "clusters: at least one, named with lowercase letters, digits and hyphens."
  }
}

variable "control_plane_secret" {
  description = "The Secret (in the namespace) with the control plane's settings the region needs: keys database-url, celery-broker-url and controller-client-secret (the controllers'), broker-client-secret (the brokers')."
  type        = string
}

variable "identity" {
  description = "The identity provider: Keycloak's base URL and realm (tokens are verified against its JWKS)."
  type = object({
    keycloak_url = string
    realm        = optional(string, "meridian")
  })
}

variable "broker_tls_secret" {
  description = "A kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) the brokers serve gRPC and Kafka with; the controllers get its ca.crt only. null: plaintext inside the cluster network. The control plane's module needs the same CA (its broker_tls_ca_secret)."
  type        = string
  default     = null
}

variable "monitoring_namespaces" {
  description = "Namespaces whose pods may scrape the brokers' metrics (port 9464; per-topic and per-group series); none: nobody may."
  type        = list(string)
  default     = []
}

variable "labels" {
  description = "Labels added to every object."
  type        = map(string)
  default     = {}
}
