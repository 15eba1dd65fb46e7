# Meridian's control plane on Kubernetes: the REST API and console behind an Ingress
# with TLS, the Celery workers and beat, the database migration, and Postgres, Redis and
# Keycloak unless managed ones are named. The objects are computed by ./manifests (no
# provider needed: the tests render them) and applied here. Regions come from
# modules/region, each in a namespace of its own in this same Kubernetes cluster: the
# control plane reaches brokers at their cluster-local names (.svc), and the region's
# controllers reach the Postgres deployed here at its ClusterIP.
#
# Before applying: the namespace's Secret `control_plane_secret` (see variables.tf) and
# the API's TLS Secret `api.tls_secret`.

module "manifests" {
  source = "./manifests"

  namespace            = var.namespace
  create_namespace     = var.create_namespace
  image                = var.image
  image_pull_policy    = var.image_pull_policy
  api                  = var.api
  workers              = var.workers
  control_plane_secret = var.control_plane_secret
  identity             = var.identity
  object_store         = var.object_store
  postgres             = var.postgres
  redis                = var.redis
  keycloak             = var.keycloak
  broker_tls_ca_secret = var.broker_tls_ca_secret
  region_namespaces    = var.region_namespaces
  labels               = var.labels
}

resource "kubernetes_manifest" "namespace" {
  for_each = { for key, object in module.manifests.manifests : key => object if object.kind == "Namespace" }
  manifest = each.value
}

resource "kubernetes_manifest" "this" {
  for_each = { for key, object in module.manifests.manifests : key => object if object.kind != "Namespace" }
  manifest = each.value

  field_manager {
    name = "meridian-terraform"
  }

  depends_on = [kubernetes_manifest.namespace]
}
