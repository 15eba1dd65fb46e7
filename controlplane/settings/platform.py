"""Meridian's own knobs: default quotas, the controller, local brokers."""

import json

from controlplane.settings.env import env

DATA_DIR = env("MERIDIAN_DATA_DIR", "var/controlplane")

DEFAULT_QUOTA = {
    "max_topics": env("MERIDIAN_DEFAULT_MAX_TOPICS", 100, int),
    "max_partitions": env("MERIDIAN_DEFAULT_MAX_PARTITIONS", 1000, int),
    "max_storage_bytes": env("MERIDIAN_DEFAULT_MAX_STORAGE_BYTES", 100 * 2**30, int),
    "produce_bytes_per_s": env("MERIDIAN_DEFAULT_PRODUCE_BYTES_PER_S", 50 * 2**20, int),
    "fetch_bytes_per_s": env("MERIDIAN_DEFAULT_FETCH_BYTES_PER_S", 100 * 2**20, int),
    "requests_per_s": env("MERIDIAN_DEFAULT_REQUESTS_PER_S", 10_000, int),
    "max_lanes": env("MERIDIAN_DEFAULT_MAX_LANES", 20, int),
    "max_mirrors": env("MERIDIAN_DEFAULT_MAX_MIRRORS", 5, int),
    "max_exports": env("MERIDIAN_DEFAULT_MAX_EXPORTS", 10, int),
    "max_indexes": env("MERIDIAN_DEFAULT_MAX_INDEXES", 10, int),
}

TOPIC_LIMITS = {
    "max_partitions_per_topic": env("MERIDIAN_MAX_PARTITIONS_PER_TOPIC", 1024, int),
    "min_retention_ms": 60_000,
    "max_retention_ms": 365 * 24 * 3600 * 1000,
    "default_retention_ms": 7 * 24 * 3600 * 1000,
    "default_retention_bytes": env("MERIDIAN_DEFAULT_RETENTION_BYTES", 2**30, int),
    "min_retention_bytes": 2**20,
    "max_retention_bytes": 2**40,
}

CONTROLLER_TICK_S = env("MERIDIAN_CONTROLLER_TICK_S", 1.0, float)
# A broker that has missed heartbeats this long is unreachable.
BROKER_SESSION_TIMEOUT_S = env("MERIDIAN_BROKER_SESSION_TIMEOUT_S", 6.0, float)
BROKER_RPC_TIMEOUT_S = env("MERIDIAN_BROKER_RPC_TIMEOUT_S", 5.0, float)
# The controller's metadata push (its heartbeat) waits this long for each broker: a
# hung broker must not stretch every tick, which would delay its own detection.
METADATA_PUSH_TIMEOUT_S = env("MERIDIAN_METADATA_PUSH_TIMEOUT_S", 1.5, float)
# A new topic's replication factor unless it names one (at most the cluster's brokers).
DEFAULT_REPLICATION_FACTOR = env("MERIDIAN_DEFAULT_REPLICATION_FACTOR", 3, int)
# How long a preferred leader must have been live (and in sync) before the controller
# moves leadership back to it.
PREFERRED_LEADER_DELAY_S = env("MERIDIAN_PREFERRED_LEADER_DELAY_S", 5.0, float)

# Lanes: how long a lane and its lane topics live without traffic unless the lane says
# (``Lane.ttl_s``), and how long after its consumers were last seen a lane still counts
# as live when someone deletes it (409 unless forced).
LANE_DEFAULT_TTL_S = env("MERIDIAN_LANE_DEFAULT_TTL_S", 7 * 24 * 3600, int)
LANE_LIVE_GRACE_S = env("MERIDIAN_LANE_LIVE_GRACE_S", 60.0, float)
# How long a lane stays live for a trunk topic after the last broker report showing one
# of its consumer groups on it: a lane consumer's restart must not orphan the lane topic
# (and rebalance every trunk group of the topic twice).
LANE_ORPHAN_AFTER_S = env("MERIDIAN_LANE_ORPHAN_AFTER_S", 10.0, float)

# Delays: the partitions of a tenant's timer log on a cluster, made on first use (each
# led where the controller places it, moving its records when due).
DELAY_TIMER_PARTITIONS = env("MERIDIAN_DELAY_TIMER_PARTITIONS", 3, int)

# Tiered storage: a partition leader whose oldest sealed segment has waited longer than
# this for its upload is reported as drift (the object store may be unreachable; local
# retention waits for the upload, so the broker's disk fills meanwhile).
TIER_UPLOAD_LAG_FINDING_MS = env("MERIDIAN_TIER_UPLOAD_LAG_FINDING_MS", 5 * 60 * 1000, int)

# Spark jobs (exports, index builds): a run is killed past this long.
SPARK_JOB_TIMEOUT_S = env("MERIDIAN_SPARK_JOB_TIMEOUT_S", 3600.0, float)
# A continuous export's job starts a run this long after the last began.
EXPORT_CONTINUOUS_INTERVAL_S = env("MERIDIAN_EXPORT_CONTINUOUS_INTERVAL_S", 30.0, float)
# Where exports may write: comma-separated prefixes (folder paths or URIs; ``{tenant}``
# stands for the tenant's slug), by default a folder per tenant under the data directory.
EXPORT_ALLOWED_URIS = [
    p.strip()
    for p in env("MERIDIAN_EXPORT_ALLOWED_URIS", f"{DATA_DIR}/exports/{{tenant}}/").split(",")
    if p.strip()
]
# The filesystem options (an S3 endpoint, credentials) of targets under an allowed
# prefix: a JSON object of prefix -> options.
EXPORT_TARGET_OPTIONS: dict[str, dict[str, object]] = env(
    "MERIDIAN_EXPORT_TARGET_OPTIONS", {}, json.loads
)
# Where index files go: ``<INDEX_ROOT>/<tenant id>/<index id>`` (a folder path or a URI),
# opened with INDEX_ROOT_OPTIONS (JSON).
INDEX_ROOT = env("MERIDIAN_INDEX_ROOT", f"{DATA_DIR}/indexes")
INDEX_ROOT_OPTIONS: dict[str, object] = env("MERIDIAN_INDEX_ROOT_OPTIONS", {}, json.loads)

# Mirror links (docs/mirror.md). A worker whose status cannot be read for this long is
# unreadable: the link is degraded, and its controller replaces the worker.
MIRROR_WORKER_TIMEOUT_S = env("MERIDIAN_MIRROR_WORKER_TIMEOUT_S", 10.0, float)
# The controller reads each worker's status with this timeout (a hung worker must not
# stretch its supervision round).
MIRROR_STATUS_TIMEOUT_S = env("MERIDIAN_MIRROR_STATUS_TIMEOUT_S", 0.5, float)
# A partition in error, or behind and not moving, for this long degrades its link.
MIRROR_STALL_S = env("MERIDIAN_MIRROR_STALL_S", 30.0, float)
# How often at most a worker records an offset-map point per partition.
MIRROR_CHECKPOINT_INTERVAL_MS = env("MERIDIAN_MIRROR_CHECKPOINT_INTERVAL_MS", 5000, int)
# The newest offset-map points kept per leg and partition (older ones are pruned).
MIRROR_OFFSET_POINTS_KEPT = env("MERIDIAN_MIRROR_OFFSET_POINTS_KEPT", 10_000, int)
# A worker's copy batches (the worker config's ``batch``).
MIRROR_WORKER_BATCH = {
    "max_records": env("MERIDIAN_MIRROR_BATCH_MAX_RECORDS", 5000, int),
    "max_bytes": env("MERIDIAN_MIRROR_BATCH_MAX_BYTES", 4 * 2**20, int),
    "linger_ms": env("MERIDIAN_MIRROR_BATCH_LINGER_MS", 5, int),
}
