# The control plane's Kubernetes objects as data (see modules/region/manifests): the API
# and console, the Celery workers and beat, the database migration, and Postgres, Redis
# and Keycloak unless managed ones are named.

locals {
  labels = merge(var.labels, { "app.kubernetes.io/part-of" = "meridian" })
  secret = var.control_plane_secret

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

  # Settings every control-plane process reads; then each process's secrets, no more
  # than it uses.
  plain_env = [for name, value in merge({
    MERIDIAN_IDENTITY            = "keycloak"
    MERIDIAN_KEYCLOAK_URL        = var.identity.keycloak_url
    MERIDIAN_KEYCLOAK_REALM      = var.identity.realm
    MERIDIAN_BROKER_AUTH         = "true"
    MERIDIAN_DATA_DIR            = "/var/lib/meridian"
    MERIDIAN_ALLOWED_HOSTS       = var.api.host
    MERIDIAN_API_BASE_URL        = "https://${var.api.host}"
    MERIDIAN_SECURE_COOKIES      = "true"
    MERIDIAN_EXPORT_ALLOWED_URIS = join(",", var.object_store.export_allowed_uris)
    MERIDIAN_INDEX_ROOT          = var.object_store.index_root
  }, { for k, v in { MERIDIAN_BROKER_TLS_CA_FILE = "/etc/meridian/broker-ca/ca.crt" } : k => v if local.broker_tls }) : { name = name, value = value }]
  secret_keys = {
    # The API and the Celery processes: the database, Celery's transport, Django's key
    # (the console's sessions), Keycloak's admin (tenants, members, service accounts)
    # and the controller client's secret (their calls to brokers).
    service = {
      MERIDIAN_DATABASE_URL             = "database-url"
      MERIDIAN_CELERY_BROKER_URL        = "celery-broker-url"
      MERIDIAN_SECRET_KEY               = "secret-key"
      MERIDIAN_KEYCLOAK_ADMIN_PASSWORD  = "keycloak-admin-password"
      MERIDIAN_CONTROLLER_CLIENT_SECRET = "controller-client-secret"
    }
    # The migration and bootstrap_identity, which gives the realm's internal clients
    # the secrets the controllers and the brokers are given.
    migrate = {
      MERIDIAN_DATABASE_URL             = "database-url"
      MERIDIAN_CELERY_BROKER_URL        = "celery-broker-url"
      MERIDIAN_KEYCLOAK_ADMIN_PASSWORD  = "keycloak-admin-password"
      MERIDIAN_CONTROLLER_CLIENT_SECRET = "controller-client-secret"
      MERIDIAN_BROKER_CLIENT_SECRET     = "broker-client-secret"
    }
  }
  env = { for role, keys in local.secret_keys : role => concat(local.plain_env, [
    for name, key in keys : { name = name, valueFrom = { secretKeyRef = { name = local.secret, key = key } } }
  ]) }

  # The brokers' CA (their certificates are checked on every call to them), alone.
  broker_tls       = var.broker_tls_ca_secret != null
  broker_ca_volume = [for v in [{ name = "broker-ca", secret = { secretName = var.broker_tls_ca_secret, items = [{ key = "ca.crt", path = "ca.crt" }] } }] : v if local.broker_tls]
  broker_ca_mount  = [for m in [{ name = "broker-ca", mountPath = "/etc/meridian/broker-ca", readOnly = true }] : m if local.broker_tls]

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

  service_account = {
    service_account = {
      apiVersion                   = "v1"
      kind                         = "ServiceAccount"
      metadata                     = { name = "meridian", namespace = var.namespace, labels = local.labels }
      automountServiceAccountToken = false
    }
  }

  # One control-plane container: the image, its settings, writable /tmp and data only.
  container = {
    image           = var.image
    imagePullPolicy = var.image_pull_policy
    env             = local.env.service
    securityContext = local.container_security
    volumeMounts    = concat([{ name = "data", mountPath = "/var/lib/meridian" }, { name = "tmp", mountPath = "/tmp" }], local.broker_ca_mount)
  }
  volumes = concat([{ name = "data", emptyDir = {} }, { name = "tmp", emptyDir = {} }], local.broker_ca_volume)

  processes = {
    api = {
      replicas = var.api.replicas
      # The Ingress ends TLS: waitress takes its X-Forwarded-Proto (and drops the other
      # forwarding headers), so Django sees https (the console's CSRF origin check, the
      # sign-in's redirect URI).
      command = ["python", "-m", "waitress", "--port", "8000", "--trusted-proxy", "*",
        "--trusted-proxy-headers", "x-forwarded-proto", "--clear-untrusted-proxy-headers",
      "controlplane.wsgi:application"]
      ports = [{ name = "http", containerPort = 8000 }]
      probes = {
        readinessProbe = { tcpSocket = { port = 8000 }, periodSeconds = 5 }
        livenessProbe  = { tcpSocket = { port = 8000 }, periodSeconds = 10, failureThreshold = 6 }
      }
      resources = { requests = { cpu = "500m", memory = "1Gi" }, limits = { cpu = "2", memory = "2Gi" } }
    }
    worker = {
      replicas  = var.workers
      command   = ["celery", "-A", "controlplane", "worker", "--loglevel", "INFO"]
      ports     = []
      probes    = {}
      resources = { requests = { cpu = "500m", memory = "1Gi" }, limits = { cpu = "2", memory = "4Gi" } }
    }
    beat = {
      replicas = 1 # one schedule: two beats would run every periodic job twice
      # Its schedule's state file on the data volume: the root filesystem is read-only.
      command   = ["celery", "-A", "controlplane", "beat", "--loglevel", "INFO", "--schedule", "/var/lib/meridian/celerybeat-schedule"]
      ports     = []
      probes    = {}
      resources = { requests = { cpu = "100m", memory = "256Mi" }, limits = { cpu = "500m", memory = "512Mi" } }
    }
  }

  deployments = { for name, p in local.processes : "${name}_deployment" => {
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = "meridian-${name}", namespace = var.namespace, labels = local.labels }
    spec = {
      replicas = p.replicas
      strategy = name == "beat" ? { type = "Recreate" } : { type = "RollingUpdate" }
      selector = { matchLabels = { "app.kubernetes.io/name" = "meridian-${name}" } }
      template = {
        metadata = { labels = merge(local.labels, { "app.kubernetes.io/name" = "meridian-${name}" }) }
        spec = {
          serviceAccountName           = "meridian"
          automountServiceAccountToken = false
          securityContext              = local.pod_security
          containers = [merge(local.container, p.probes, {
            name      = name
            command   = p.command
            ports     = p.ports
            resources = p.resources
          })]
          volumes = local.volumes
        }
      }
    }
  } }

  api = {
    api_service = {
      apiVersion = "v1"
      kind       = "Service"
      metadata   = { name = "meridian-api", namespace = var.namespace, labels = local.labels }
      spec = {
        selector = { "app.kubernetes.io/name" = "meridian-api" }
        ports    = [{ name = "http", port = 80, targetPort = 8000 }]
      }
    }
    api_ingress = {
      apiVersion = "networking.k8s.io/v1"
      kind       = "Ingress"
      metadata   = { name = "meridian-api", namespace = var.namespace, labels = local.labels }
      spec = merge(
        {
          tls = [{ hosts = [var.api.host], secretName = var.api.tls_secret }]
          rules = [{
            host = var.api.host
            http = { paths = [{ path = "/", pathType = "Prefix", backend = { service = { name = "meridian-api", port = { number = 80 } } } }] }
          }]
        },
        { for k, v in { ingressClassName = var.api.ingress_class } : k => v if v != null },
      )
    }
    # The schema and the realm, before the API serves: a Job named by what it runs (its
    # pod template), so a new image or setting runs it once more, as a new Job (a Job's
    # template cannot change), and an unchanged one is left alone (no TTL: a Job
    # Kubernetes removed would be made again by every plan).
    migrate_job = {
      apiVersion = "batch/v1"
      kind       = "Job"
      metadata   = { name = "meridian-migrate-${substr(sha256(jsonencode(local.migrate_template)), 0, 10)}", namespace = var.namespace, labels = local.labels }
      spec       = { backoffLimit = 6, template = local.migrate_template }
    }
  }
  migrate_template = {
    metadata = { labels = merge(local.labels, { "app.kubernetes.io/name" = "meridian-migrate" }) }
    spec = {
      restartPolicy                = "OnFailure"
      serviceAccountName           = "meridian"
      automountServiceAccountToken = false
      securityContext              = local.pod_security
      containers = [merge(local.container, {
        name      = "migrate"
        env       = local.env.migrate
        command   = ["/bin/sh", "-c", "meridian-control migrate && meridian-control bootstrap_identity"]
        resources = { requests = { cpu = "250m", memory = "512Mi" }, limits = { cpu = "1", memory = "1Gi" } }
      })]
      volumes = local.volumes
    }
  }

  # A backing service run here: a StatefulSet of one with a volume, a Service, and its
  # password from the control plane's Secret.
  backing = {
    postgres = {
      deploy   = var.postgres.deploy
      image    = var.postgres.image
      port     = 5432
      user     = 999
      args     = []
      env      = [{ name = "POSTGRES_USER", value = "meridian" }, { name = "POSTGRES_DB", value = "meridian" }, { name = "PGDATA", value = "/var/lib/postgresql/data/pgdata" }, { name = "POSTGRES_PASSWORD", valueFrom = { secretKeyRef = { name = local.secret, key = "postgres-password" } } }]
      data     = "/var/lib/postgresql/data"
      writable = ["/var/run/postgresql", "/tmp"]
      size     = var.postgres.storage_size
      class    = var.postgres.storage_class
      probe    = { exec = { command = ["pg_isready", "-U", "meridian"] }, periodSeconds = 10 }
    }
    redis = {
      deploy   = var.redis.deploy
      image    = var.redis.image
      port     = 6379
      user     = 999
      args     = ["/bin/sh", "-c", "exec redis-server --requirepass \"$REDIS_PASSWORD\" --appendonly yes --dir /data"]
      env      = [{ name = "REDIS_PASSWORD", valueFrom = { secretKeyRef = { name = local.secret, key = "redis-password" } } }]
      data     = "/data"
      writable = ["/tmp"]
      size     = "10Gi"
      class    = null
      probe    = { tcpSocket = { port = 6379 }, periodSeconds = 10 }
    }
  }
  backing_objects = merge([for name, b in local.backing : {
    "${name}_service" = {
      apiVersion = "v1"
      kind       = "Service"
      metadata   = { name = name, namespace = var.namespace, labels = local.labels }
      spec       = { selector = { "app.kubernetes.io/name" = name }, ports = [{ name = name, port = b.port, targetPort = b.port }] }
    }
    "${name}_statefulset" = {
      apiVersion = "apps/v1"
      kind       = "StatefulSet"
      metadata   = { name = name, namespace = var.namespace, labels = local.labels }
      spec = {
        serviceName = name
        replicas    = 1
        selector    = { matchLabels = { "app.kubernetes.io/name" = name } }
        template = {
          metadata = { labels = merge(local.labels, { "app.kubernetes.io/name" = name }) }
          spec = {
            automountServiceAccountToken = false
            securityContext              = merge(local.pod_security, { runAsUser = b.user, runAsGroup = b.user, fsGroup = b.user })
            containers = [merge({
              name            = name
              image           = b.image
              imagePullPolicy = var.image_pull_policy
              env             = b.env
              ports           = [{ name = name, containerPort = b.port }]
              readinessProbe  = b.probe
              livenessProbe   = merge(b.probe, { failureThreshold = 6 })
              resources       = { requests = { cpu = "500m", memory = "1Gi" }, limits = { cpu = "2", memory = "4Gi" } }
              securityContext = merge(local.container_security, { runAsUser = b.user })
              volumeMounts = concat([{ name = "data", mountPath = b.data }],
              [for i, path in b.writable : { name = "scratch-${i}", mountPath = path }])
            }, { for k, v in { command = b.args } : k => v if length(v) > 0 })]
            volumes = [for i, path in b.writable : { name = "scratch-${i}", emptyDir = {} }]
          }
        }
        volumeClaimTemplates = [{
          metadata = { name = "data", labels = local.labels }
          spec = merge(
            { accessModes = ["ReadWriteOnce"], resources = { requests = { storage = b.size } } },
            { for k, v in { storageClassName = b.class } : k => v if v != null },
          )
        }]
      }
    }
  } if b.deploy]...)

  keycloak = { for key, object in {
    keycloak_service = {
      apiVersion = "v1"
      kind       = "Service"
      metadata   = { name = "keycloak", namespace = var.namespace, labels = local.labels }
      spec       = { selector = { "app.kubernetes.io/name" = "keycloak" }, ports = [{ name = "http", port = 80, targetPort = 8080 }] }
    }
    keycloak_deployment = {
      apiVersion = "apps/v1"
      kind       = "Deployment"
      metadata   = { name = "keycloak", namespace = var.namespace, labels = local.labels }
      spec = {
        replicas = 1
        selector = { matchLabels = { "app.kubernetes.io/name" = "keycloak" } }
        template = {
          metadata = { labels = merge(local.labels, { "app.kubernetes.io/name" = "keycloak" }) }
          spec = {
            automountServiceAccountToken = false
            securityContext              = merge(local.pod_security, { runAsUser = 1000, runAsGroup = 1000, fsGroup = 1000 })
            # `start` builds Keycloak for its options (Postgres, health) into lib/quarkus
            # before it serves: that folder is made writable, a copy of the image's.
            initContainers = [{
              name            = "quarkus"
              image           = var.keycloak.image
              imagePullPolicy = var.image_pull_policy
              command         = ["/bin/sh", "-c", "cp -R /opt/keycloak/lib/quarkus/. /quarkus/"]
              resources       = { requests = { cpu = "100m", memory = "128Mi" }, limits = { cpu = "500m", memory = "256Mi" } }
              securityContext = merge(local.container_security, { runAsUser = 1000 })
              volumeMounts    = [{ name = "quarkus", mountPath = "/quarkus" }]
            }]
            containers = [{
              name            = "keycloak"
              image           = var.keycloak.image
              imagePullPolicy = var.image_pull_policy
              args            = ["start", "--http-enabled=true", "--proxy-headers=xforwarded", "--health-enabled=true"]
              env = concat(
                [for name, value in {
                  KC_DB                       = "postgres"
                  KC_HOSTNAME                 = var.identity.keycloak_url
                  KC_BOOTSTRAP_ADMIN_USERNAME = "admin"
                } : { name = name, value = value }],
                [for name, key in {
                  KC_DB_URL                   = "keycloak-database-url"
                  KC_DB_USERNAME              = "keycloak-database-username"
                  KC_DB_PASSWORD              = "keycloak-database-password"
                  KC_BOOTSTRAP_ADMIN_PASSWORD = "keycloak-admin-password"
                } : { name = name, valueFrom = { secretKeyRef = { name = local.secret, key = key } } }],
              )
              ports           = [{ name = "http", containerPort = 8080 }, { name = "management", containerPort = 9000 }]
              readinessProbe  = { httpGet = { path = "/health/ready", port = 9000 }, periodSeconds = 10 }
              livenessProbe   = { httpGet = { path = "/health/live", port = 9000 }, periodSeconds = 10, failureThreshold = 6 }
              resources       = { requests = { cpu = "500m", memory = "1Gi" }, limits = { cpu = "2", memory = "2Gi" } }
              securityContext = merge(local.container_security, { runAsUser = 1000 })
              volumeMounts = [
                { name = "data", mountPath = "/opt/keycloak/data" }, { name = "tmp", mountPath = "/tmp" },
                { name = "quarkus", mountPath = "/opt/keycloak/lib/quarkus" },
              ]
            }]
            volumes = [{ name = "data", emptyDir = {} }, { name = "tmp", emptyDir = {} }, { name = "quarkus", emptyDir = {} }]
          }
        }
      }
    }
    # Browsers sign in there and clients outside the cluster get tokens there: the
    # identity URL's host, TLS ended at the Ingress.
    keycloak_ingress = {
      apiVersion = "networking.k8s.io/v1"
      kind       = "Ingress"
      metadata   = { name = "keycloak", namespace = var.namespace, labels = local.labels }
      spec = merge(
        {
          tls = [{ hosts = [local.keycloak_host], secretName = coalesce(var.keycloak.tls_secret, var.api.tls_secret) }]
          rules = [{
            host = local.keycloak_host
            http = { paths = [{ path = "/", pathType = "Prefix", backend = { service = { name = "keycloak", port = { number = 80 } } } }] }
          }]
        },
        { for k, v in { ingressClassName = var.api.ingress_class } : k => v if v != null },
      )
    }
  } : key => object if var.keycloak.deploy }
  keycloak_host = regex("^https?://([^/:]+)", var.identity.keycloak_url)[0]

  # Postgres and Redis take connections from the control plane's own pods (Keycloak's
  # too, for Postgres) and the regions' controllers, each namespace named by the name
  # Kubernetes gives it (a label no one can set): no other pod, no broker.
  clients = {
    postgres = concat(["meridian-api", "meridian-worker", "meridian-beat", "meridian-migrate"], var.keycloak.deploy ? ["keycloak"] : [])
    redis    = ["meridian-api", "meridian-worker", "meridian-beat", "meridian-migrate"]
  }
  network = { for name, b in local.backing : "${name}_network_policy" => {
    apiVersion = "networking.k8s.io/v1"
    kind       = "NetworkPolicy"
    metadata   = { name = name, namespace = var.namespace, labels = local.labels }
    spec = {
      podSelector = { matchLabels = { "app.kubernetes.io/name" = name } }
      policyTypes = ["Ingress"]
      ingress = [{
        from = concat(
          [{ podSelector = { matchExpressions = [{ key = "app.kubernetes.io/name", operator = "In", values = local.clients[name] }] } }],
          [for peer in [{
            namespaceSelector = { matchExpressions = [{ key = "kubernetes.io/metadata.name", operator = "In", values = var.region_namespaces }] }
            podSelector       = { matchLabels = { "app.kubernetes.io/name" = "meridian-controller" } }
          }] : peer if length(var.region_namespaces) > 0],
        )
        ports = [{ port = b.port, protocol = "TCP" }]
      }]
    }
  } if b.deploy }
}
