"""Celery: Redis as the broker outside the demo; the demo uses kombu's filesystem
transport (``filesystem://``) with a real worker."""

from controlplane.settings.env import as_bool, env

CELERY_BROKER_URL = env("MERIDIAN_CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
_queue_dir = env("MERIDIAN_CELERY_QUEUE_DIR", "")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's own writes a message file in place, which a polling worker may read empty.
    CELERY_BROKER_TRANSPORT = "controlplane.core.filesystem_transport:Transport"
if CELERY_BROKER_URL.startswith("filesystem://") and _queue_dir:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": _queue_dir,
        "data_folder_out": _queue_dir,
        "processed_folder": _queue_dir + "-processed",
        "store_processed": False,
        "control_folder": _queue_dir + "-control",
    }
CELERY_TASK_ALWAYS_EAGER = env("MERIDIAN_CELERY_EAGER", False, as_bool)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"

RECONCILE_INTERVAL_S = env("MERIDIAN_RECONCILE_INTERVAL_S", 30.0, float)
# Rate and lag history: one collection per interval (the fine tier is 10 s points).
METRICS_INTERVAL_S = env("MERIDIAN_METRICS_INTERVAL_S", 10.0, float)
# Idle lanes and lane topics are collected once per interval (their TTL is hours or days).
LANES_GC_INTERVAL_S = env("MERIDIAN_LANES_GC_INTERVAL_S", 60.0, float)
# Databus agents silent for days are forgotten; an hourly pass is fine enough.
DATABUS_FORGET_INTERVAL_S = env("MERIDIAN_DATABUS_FORGET_INTERVAL_S", 3600.0, float)
# Stray incarnations in the clusters' object stores (tiered storage) are rare leftovers
# of deletions the store missed: an hourly pass is enough.
TIER_CLEAN_INTERVAL_S = env("MERIDIAN_TIER_CLEAN_INTERVAL_S", 3600.0, float)

# Exports due by their schedule are queued at most this often (cron's resolution).
EXPORTS_SCHEDULE_INTERVAL_S = env("MERIDIAN_EXPORTS_SCHEDULE_INTERVAL_S", 60.0, float)

# The beat schedule, in one place.
CELERY_BEAT_SCHEDULE = {
    "topics.reconcile_all": {
        "task": "topics.reconcile_all",
        "schedule": RECONCILE_INTERVAL_S,
        "options": {"expires": RECONCILE_INTERVAL_S},
    },
    "topics.clean_remote_stores": {
        "task": "topics.clean_remote_stores",
        "schedule": TIER_CLEAN_INTERVAL_S,
        "options": {"expires": TIER_CLEAN_INTERVAL_S},
    },
    "regions.reconcile_clusters": {
        "task": "regions.reconcile_clusters",
        "schedule": RECONCILE_INTERVAL_S,
        "options": {"expires": RECONCILE_INTERVAL_S},
    },
    "tenants.reconcile_tenants": {
        "task": "tenants.reconcile_tenants",
        "schedule": RECONCILE_INTERVAL_S,
        "options": {"expires": RECONCILE_INTERVAL_S},
    },
    "lanes.collect_idle_lanes": {
        "task": "lanes.collect_idle_lanes",
        "schedule": LANES_GC_INTERVAL_S,
        "options": {"expires": LANES_GC_INTERVAL_S},
    },
    "databus.forget_silent_agents": {
        "task": "databus.forget_silent_agents",
        "schedule": DATABUS_FORGET_INTERVAL_S,
        "options": {"expires": DATABUS_FORGET_INTERVAL_S},
    },
    "exports.enqueue_due_exports": {
        "task": "exports.enqueue_due_exports",
        "schedule": EXPORTS_SCHEDULE_INTERVAL_S,
        "options": {"expires": EXPORTS_SCHEDULE_INTERVAL_S},
    },
    "metrics.collect_metrics": {
        "task": "metrics.collect_metrics",
        "schedule": METRICS_INTERVAL_S,
        "options": {"expires": METRICS_INTERVAL_S},
    },
    "metrics.roll_up_metrics": {
        "task": "metrics.roll_up_metrics",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    "metrics.prune_metrics": {
        "task": "metrics.prune_metrics",
        "schedule": 300.0,
        "options": {"expires": 300.0},
    },
}
