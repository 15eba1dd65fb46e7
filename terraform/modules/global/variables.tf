variable "namespace" {
  description = "The Kubernetes namespace of the control plane."
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

variable "api" {
  description = "The REST API and console: replicas, the public host name, the TLS Secret (kubernetes.io/tls) its Ingress serves, and the Ingress class."
  type = object({
    replicas      = optional(number, 2)
    host          = string
    tls_secret    = string
    ingress_class = optional(string)
  })
}

variable "workers" {
  description = "Celery worker replicas (the beat runs once, beside them)."
  type        = number
  default     = 2
}

variable "control_plane_secret" {
  description = "The Secret (in the namespace) with the control plane's settings: keys database-url, celery-broker-url, secret-key, keycloak-admin-password, controller-client-secret, broker-client-secret (the internal clients' secrets, which bootstrap_identity gives the realm); with deployed Postgres postgres-password, Redis redis-password, Keycloak keycloak-database-url, keycloak-database-username, keycloak-database-password."
  type        = string
}

variable "broker_tls_ca_secret" {
  description = "A Secret (in the namespace) whose key ca.crt is the CA of the brokers' certificates (the regions' broker_tls_secret's ca.crt): the API and Celery processes call brokers over TLS checked with it. null: the brokers speak plaintext."
  type        = string
  default     = null
}

variable "region_namespaces" {
  description = "The namespaces of the regions (modules/region, in this Kubernetes cluster) whose controllers reach the Postgres and Redis deployed here."
  type        = list(string)
  default     = []
}

variable "identity" {
  description = "The identity provider: Keycloak's public base URL (https://host for one deployed here) and realm."
  type = object({
    keycloak_url = string
    realm        = optional(string, "meridian")
  })
  validation {
    condition     = can(regex("^https?://[^/:]+", var.identity.keycloak_url))
    error_message = "identity.keycloak_url: an http(s):// URL with a host."
  }
}

variable "object_store" {
  description = "Where Parquet exports may write (prefixes; {tenant} is the tenant's slug) and where index files go, e.g. s3://bucket/exports/{tenant}/ and s3://bucket/indexes; their fsspec options (credentials) are in the Secret's key object-store-options when set."
  type = object({
    export_allowed_uris = list(string)
    index_root          = string
  })
}

variable "postgres" {
  description = "deploy: run Postgres here (a StatefulSet with a volume), else database-url names a managed one."
  type = object({
    deploy        = optional(bool, true)
    image         = optional(string, "postgres:16.6")
    storage_size  = optional(string, "50Gi")
    storage_class = optional(string)
  })
  default = {}
}

variable "redis" {
  description = "deploy: run Redis here (Celery's transport), else celery-broker-url names a managed one."
  type = object({
    deploy = optional(bool, true)
    image  = optional(string, "redis:7.4.2")
  })
  default = {}
}

variable "keycloak" {
  description = "deploy: run Keycloak here (its database given by the Secret's keycloak-database-* keys), served by an Ingress at identity.keycloak_url's host (a host of its own, https://host without a path) with the TLS Secret tls_secret (null: api.tls_secret); else identity.keycloak_url names one run elsewhere."
  type = object({
    deploy     = optional(bool, true)
    image      = optional(string, "quay.io/keycloak/keycloak:26.4.7")
    tls_secret = optional(string)
  })
  default = {}
}

variable "labels" {
  description = "Labels added to every object."
  type        = map(string)
  default     = {}
}
