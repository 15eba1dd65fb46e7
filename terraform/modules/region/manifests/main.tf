# The region's Kubernetes objects as data: `manifests` maps a key to each object, which
# the region module applies (kubernetes_manifest) and the tests render and check against
# the Kubernetes schemas. No provider is needed to compute them.

locals {
  app          = "meridian"
  broker_port  = 9092
  kafka_port   = 9093
  metrics_port = 9464
  realm_url    = "${trimsuffix(var.identity.keycloak_url, "/")}/realms/${var.identity.realm}"
  tls          = var.broker_tls_secret != null
  labels       = merge(var.labels, { "app.kubernetes.io/part-of" = local.app, "meridian/region" = var.region })

  pod_security = {
    runAsNonRoot   = true
    runAsUser      = 10001
    runAsGroup     = 10001
    fsGroup        = 10001
    seccompProfile = { type = "RuntimeDefault" }
  }
  container_security = {
    allowPrivilegeEscalation = false
    readOnlyRootFilesystem   = true
    runAsNonRoot             = true
    runAsUser                = 10001
    capabilities             = { drop = ["ALL"] }
  }

  # What a controller needs of the control plane's settings, and no more: its database,
  # Celery's transport (it enqueues jobs) and its own client's secret (tokens for the
  # brokers) — not the identity provider's admin password, the brokers' secret or
  # Django's key.
  secret_env = [
    for name, key in {
      MERIDIAN_DATABASE_URL             = "database-url"
      MERIDIAN_CELERY_BROKER_URL        = "celery-broker-url"
      MERIDIAN_CONTROLLER_CLIENT_SECRET = "controller-client-secret"
    } : { name = name, valueFrom = { secretKeyRef = { name = var.control_plane_secret, key = key } } }
  ]
  plain_env = [
    for name, value in merge({
      MERIDIAN_IDENTITY               = "keycloak"
      MERIDIAN_KEYCLOAK_URL           = var.identity.keycloak_url
      MERIDIAN_KEYCLOAK_REALM         = var.identity.realm
      MERIDIAN_BROKER_AUTH            = "true"
      MERIDIAN_DATA_DIR               = "/var/lib/meridian"
      MERIDIAN_KUBERNETES_NAMESPACE   = var.namespace
      MERIDIAN_KUBERNETES_BROKER_PORT = tostring(local.broker_port)
      MERIDIAN_KUBERNETES_KAFKA_PORT  = tostring(local.kafka_port)
    }, { for k, v in { MERIDIAN_BROKER_TLS_CA_FILE = "/etc/meridian/tls/ca.crt" } : k => v if local.tls }) : { name = name, value = value }
  ]
  # (Conditional parts are for-expressions with an `if`: HCL's ?: wants one type on both sides.)
  # Brokers mount the whole TLS Secret (their key); controllers its CA certificate only.
  tls_volume = [for v in [{ name = "tls", secret = { secretName = var.broker_tls_secret, defaultMode = 256 } }] : v if local.tls]
  tls_mount  = [for m in [{ name = "tls", mountPath = "/etc/meridian/tls", readOnly = true }] : m if local.tls]
  ca_volume  = [for v in [{ name = "tls", secret = { secretName = var.broker_tls_secret, items = [{ key = "ca.crt", path = "ca.crt" }] } }] : v if local.tls]
  tls_args   = local.tls ? "--tls-cert-file /etc/meridian/tls/tls.crt --tls-key-file /etc/meridian/tls/tls.key --tls-ca-file /etc/meridian/tls/ca.crt" : ""

  namespace = { for key, object in {
    namespace = {
      apiVersion = "v1"
      kind       = "Namespace"
      metadata = {
        name   = var.namespace
        labels = merge(local.labels, { "pod-security.kubernetes.io/enforce" = "restricted" })
      }
    }
  } : key => object if var.create_namespace }

  # The controllers' identity in Kubernetes: the provisioner sizes the brokers'
  # StatefulSets and reads their pods, and nothing else.
  rbac = {
    service_account = {
      apiVersion                   = "v1"
      kind                         = "ServiceAccount"
      metadata                     = { name = "meridian-controller", namespace = var.namespace, labels = local.labels }
      automountServiceAccountToken = false
    }
    role = {
      apiVersion = "rbac.authorization.k8s.io/v1"
      kind       = "Role"
      metadata   = { name = "meridian-provisioner", namespace = var.namespace, labels = local.labels }
      rules = [
        { apiGroups = ["apps"], resources = ["statefulsets/scale"], verbs = ["get", "patch"],
        resourceNames = [for name, _ in var.clusters : "broker-${name}"] },
        { apiGroups = [""], resources = ["pods"], verbs = ["get"] },
      ]
    }
    role_binding = {
      apiVersion = "rbac.authorization.k8s.io/v1"
      kind       = "RoleBinding"
      metadata   = { name = "meridian-provisioner", namespace = var.namespace, labels = local.labels }
      roleRef    = { apiGroup = "rbac.authorization.k8s.io", kind = "Role", name = "meridian-provisioner" }
      subjects   = [{ kind = "ServiceAccount", name = "meridian-controller", namespace = var.namespace }]
    }
  }

  controller = {
    controller = {
      apiVersion = "apps/v1"
      kind       = "Deployment"
      metadata   = { name = "meridian-controller", namespace = var.namespace, labels = local.labels }
      spec = {
        replicas = var.controllers
        selector = { matchLabels = { "app.kubernetes.io/name" = "meridian-controller", "meridian/region" = var.region } }
        template = {
          metadata = { labels = merge(local.labels, { "app.kubernetes.io/name" = "meridian-controller" }) }
          spec = {
            serviceAccountName           = "meridian-controller"
            automountServiceAccountToken = true # the provisioner's calls to the Kubernetes API
            securityContext              = local.pod_security
            containers = [{
              name            = "controller"
              image           = var.image
              imagePullPolicy = var.image_pull_policy
              command         = ["python", "-m", "controlplane.controller", "--region", var.region]
              env             = concat(local.plain_env, local.secret_env)
              resources = {
                requests = { cpu = "250m", memory = "512Mi" }
                limits   = { cpu = "1", memory = "1Gi" }
              }
              securityContext = local.container_security
              volumeMounts    = concat([{ name = "data", mountPath = "/var/lib/meridian" }, { name = "tmp", mountPath = "/tmp" }], local.tls_mount)
            }]
            volumes = concat([{ name = "data", emptyDir = {} }, { name = "tmp", emptyDir = {} }], local.ca_volume)
          }
        }
      }
    }
  }

  brokers = merge([
    for name, cluster in var.clusters : {
      "broker_service_${name}" = {
        apiVersion = "v1"
        kind       = "Service"
        metadata   = { name = "broker-${name}", namespace = var.namespace, labels = local.labels }
        spec = {
          clusterIP                = "None"
          publishNotReadyAddresses = true # peers resolve each other while starting
          selector                 = { "app.kubernetes.io/name" = "broker-${name}" }
          ports = [
            { name = "grpc", port = local.broker_port, targetPort = local.broker_port },
            { name = "kafka", port = local.kafka_port, targetPort = local.kafka_port },
            { name = "metrics", port = local.metrics_port, targetPort = local.metrics_port },
          ]
        }
      }
      "broker_disruption_${name}" = {
        apiVersion = "policy/v1"
        kind       = "PodDisruptionBudget"
        metadata   = { name = "broker-${name}", namespace = var.namespace, labels = local.labels }
        spec = {
          maxUnavailable = 1
          selector       = { matchLabels = { "app.kubernetes.io/name" = "broker-${name}" } }
        }
      }
      # No replicas: the control plane's provisioner sizes it (its scale subresource), and
      # an apply must neither fight it for the field nor reset it (Kubernetes starts it at
      # one). A broker scaled away, or the whole set deleted, takes its volume with it: a
      # cluster or broker made again under the same name never finds old records.
      "broker_statefulset_${name}" = {
        apiVersion = "apps/v1"
        kind       = "StatefulSet"
        metadata   = { name = "broker-${name}", namespace = var.namespace, labels = local.labels }
        spec = {
          serviceName                          = "broker-${name}"
          podManagementPolicy                  = "Parallel"
          persistentVolumeClaimRetentionPolicy = { whenDeleted = "Delete", whenScaled = "Delete" }
          selector                             = { matchLabels = { "app.kubernetes.io/name" = "broker-${name}" } }
          template = {
            metadata = { labels = merge(local.labels, { "app.kubernetes.io/name" = "broker-${name}", "meridian/cluster" = name }) }
            spec = {
              automountServiceAccountToken  = false
              securityContext               = local.pod_security
              terminationGracePeriodSeconds = 60
              affinity = {
                podAntiAffinity = {
                  preferredDuringSchedulingIgnoredDuringExecution = [{
                    weight = 100
                    podAffinityTerm = {
                      topologyKey   = "kubernetes.io/hostname"
                      labelSelector = { matchLabels = { "app.kubernetes.io/name" = "broker-${name}" } }
                    }
                  }]
                }
              }
              containers = [{
                name            = "broker"
                image           = var.image
                imagePullPolicy = var.image_pull_policy
                # Broker N is the pod of ordinal N-1; its advertised name is its stable DNS name.
                command = ["/bin/sh", "-c", join(" ", compact([
                  "ordinal=$${HOSTNAME##*-};",
                  "exec python -m dataplane.broker --id $((ordinal + 1))",
                  "--data-dir /var/lib/meridian/broker",
                  "--listen 0.0.0.0:${local.broker_port} --kafka-listen 0.0.0.0:${local.kafka_port}",
                  "--advertised-host $${HOSTNAME}.broker-${name}.${var.namespace}.svc",
                  "--metrics-listen 0.0.0.0:${local.metrics_port}",
                  "--region ${var.region} --cluster-id ${name}",
                  "--jwks-url ${local.realm_url}/protocol/openid-connect/certs",
                  "--token-issuer ${local.realm_url}",
                  "--token-url ${local.realm_url}/protocol/openid-connect/token",
                  "--sasl-plain-token-url ${local.realm_url}/protocol/openid-connect/token",
                  "--client-id meridian-broker --client-secret-file /etc/meridian/client/secret",
                  cluster.remote_store_uri != "" ? "--remote-store-uri ${cluster.remote_store_uri}" : "",
                  cluster.remote_store_options_secret != null ? "--remote-store-options-file /etc/meridian/store/options.json" : "",
                  local.tls_args,
                ]))]
                ports = [
                  { name = "grpc", containerPort = local.broker_port },
                  { name = "kafka", containerPort = local.kafka_port },
                  { name = "metrics", containerPort = local.metrics_port },
                ]
                # gRPC's health service; a TCP connect when it serves TLS (probes speak no TLS).
                readinessProbe = {
                  tcp  = { tcpSocket = { port = local.broker_port }, periodSeconds = 5 }
                  grpc = { grpc = { port = local.broker_port }, periodSeconds = 5 }
                }[local.tls ? "tcp" : "grpc"]
                livenessProbe = { tcpSocket = { port = local.broker_port }, periodSeconds = 10, failureThreshold = 6 }
                resources = {
                  requests = { cpu = cluster.broker_cpu, memory = cluster.broker_memory }
                  limits   = { cpu = cluster.broker_cpu, memory = cluster.broker_memory }
                }
                securityContext = local.container_security
                volumeMounts = concat(
                  [
                    { name = "data", mountPath = "/var/lib/meridian" },
                    { name = "tmp", mountPath = "/tmp" },
                    { name = "client", mountPath = "/etc/meridian/client", readOnly = true },
                  ],
                  [for m in [{ name = "store", mountPath = "/etc/meridian/store", readOnly = true }] : m if cluster.remote_store_options_secret != null],
                  local.tls_mount,
                )
              }]
              volumes = concat(
                [
                  { name = "tmp", emptyDir = {} },
                  { name = "client", secret = { secretName = var.control_plane_secret, defaultMode = 256, items = [{ key = "broker-client-secret", path = "secret" }] } },
                ],
                [for v in [{ name = "store", secret = { secretName = cluster.remote_store_options_secret, defaultMode = 256 } }] : v if cluster.remote_store_options_secret != null],
                local.tls_volume,
              )
            }
          }
          volumeClaimTemplates = [{
            metadata = { name = "data", labels = local.labels }
            spec = merge(
              { accessModes = ["ReadWriteOnce"], resources = { requests = { storage = cluster.storage_size } } },
              { for k, v in { storageClassName = cluster.storage_class } : k => v if v != null },
            )
          }]
        }
      }
    }
  ]...)

  # Brokers accept gRPC and Kafka from anywhere in the cluster (clients, peers, the
  # controllers, the control plane), and their metrics (named by topic and group) from
  # the monitoring namespaces only; the controllers only call out.
  network = {
    broker_network_policy = {
      apiVersion = "networking.k8s.io/v1"
      kind       = "NetworkPolicy"
      metadata   = { name = "brokers", namespace = var.namespace, labels = local.labels }
      spec = {
        podSelector = { matchExpressions = [{ key = "meridian/cluster", operator = "Exists" }] }
        policyTypes = ["Ingress"]
        ingress = concat(
          [{ ports = [{ port = local.broker_port, protocol = "TCP" }, { port = local.kafka_port, protocol = "TCP" }] }],
          [for rule in [{
            from  = [{ namespaceSelector = { matchExpressions = [{ key = "kubernetes.io/metadata.name", operator = "In", values = var.monitoring_namespaces }] } }]
            ports = [{ port = local.metrics_port, protocol = "TCP" }]
          }] : rule if length(var.monitoring_namespaces) > 0],
        )
      }
    }
    controller_network_policy = {
      apiVersion = "networking.k8s.io/v1"
      kind       = "NetworkPolicy"
      metadata   = { name = "controllers", namespace = var.namespace, labels = local.labels }
      spec = {
        podSelector = { matchLabels = { "app.kubernetes.io/name" = "meridian-controller" } }
        policyTypes = ["Ingress"]
        ingress     = []
      }
    }
  }
}
