# A Meridian region on Kubernetes: the region's controllers (one active, the others
# standing by) and, per cluster, its brokers as a StatefulSet with a volume each and
# stable names, which the controllers' Kubernetes provisioner sizes. The objects are
# computed by ./manifests (no provider needed: the tests render them) and applied here.
#
# Before applying: the namespace's Secret `control_plane_secret` (see variables.tf), the
# control plane (modules/global, in the same Kubernetes cluster) and, through its API, the
# region and each cluster with provisioner "kubernetes" and the same name. Remove a
# cluster here only once the API deleted it: its StatefulSet's volumes go with it
# (docs/terraform.md).

module "manifests" {
  source = "./manifests"

  region                = var.region
  namespace             = var.namespace
  create_namespace      = var.create_namespace
  image                 = var.image
  image_pull_policy     = var.image_pull_policy
  controllers           = var.controllers
  clusters              = var.clusters
  control_plane_secret  = var.control_plane_secret
  identity              = var.identity
  broker_tls_secret     = var.broker_tls_secret
  monitoring_namespaces = var.monitoring_namespaces
  labels                = var.labels
}

resource "kubernetes_manifest" "namespace" {
  for_each = { for key, object in module.manifests.manifests : key => object if object.kind == "Namespace" }
  manifest = each.value
}

resource "kubernetes_manifest" "this" {
  for_each = { for key, object in module.manifests.manifests : key => object if object.kind != "Namespace" }
  manifest = each.value

  # The brokers' StatefulSets name no replicas: the controllers' provisioner owns that
  # field (its scale subresource), and server-side apply leaves what it does not send.
  # Planned unknown too, so a scaling between plan and apply is no inconsistent result.
  computed_fields = each.value.kind == "StatefulSet" ? ["metadata.labels", "metadata.annotations", "spec.replicas"] : ["metadata.labels", "metadata.annotations"]

  field_manager {
    name = "meridian-terraform"
  }

  depends_on = [kubernetes_manifest.namespace]
}
