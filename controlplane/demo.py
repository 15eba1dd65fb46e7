"""The whole platform on one machine with embedded defaults (``./dev run``).

Starts the control plane (SQLite, its own token issuer), a Celery worker on kombu's
filesystem transport (with beat for the periodic reconcile) and the API server; then,
through the REST API, creates the regions (``--regions``, default ``east,west``), each
with its controllers and one cluster of three local brokers (the controller's local
provisioner starts them, with authentication on: they verify the local issuer's tokens,
and serve Kafka's protocol beside gRPC).
The first region has two controllers (one active, one standby), every other one a single
controller. Then: a tenant ``demo`` at home in the first region and allowed in the others,
the topic ``demo.orders`` (three replicas per partition), a two-way mirror link of it
between the first region and each other one, the tiered
topic ``demo.history`` (segments sealed within a minute, then uploaded to the object
store, a folder of the demo's data), the lane ``ppe`` and a service account; produces to
the topic (acks=all) and consumes it with the SDK as that service account; starts a
Databus agent (``meridian-databus``) as that service account, following the Databus
configuration ``demo-app`` (stream ``events`` to ``demo.orders``, stream ``events-ppe`` to
its lane ``ppe``), and writes through it once; and prints the API URL, tokens, CLI and
curl commands, and the first region's Kafka bootstrap with a confluent-kafka producer
(SASL/PLAIN as the service account).

Everything runs until Ctrl-C, SIGTERM or SIGHUP (``--exit``: stop at once). A child that
exits meanwhile is started again (the standby controller takes over while the active one
restarts). Every process the demo started stops with it, even when the demo itself is
SIGKILLed (``dataplane/lifeline.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from controlplane.core.private_files import private_dir
from controlplane.demo_traffic import start_traffic, stop_traffic
from dataplane import lifeline
from dataplane.local import free_ports

T = TypeVar("T")
DEFAULT_REGIONS = "east,west"
MAX_LINK_NAME = 32  # a mirror link's name (MirrorLink.name)
CLUSTER = "main"
TENANT = "demo"
TOPIC = "orders"
# Tiered, with segments sealed at 1 MiB or 1 minute and kept on the brokers' disks for a
# minute once uploaded: the steady traffic writes to it, so uploads show within minutes.
HISTORY_TOPIC = "history"
# The history topic's JSON values ({"event", "user", "at"}): an index on the user and a
# Parquet export, both run by hand (each build or run is a Spark job).
HISTORY_INDEX = "history-by-user"
HISTORY_EXPORT = "history-parquet"
HISTORY_FIELDS = [
    {"name": "user", "path": "user", "type": "long"},
    {"name": "event", "path": "event", "type": "long"},
]
HISTORY_CONFIG = {
    "partitions": 1,
    "remote_storage": True,
    "max_segment_bytes": 2**20,
    "segment_ms": 60_000,
    "local_retention_ms": 60_000,
}
LANE = "ppe"
# The console's demo users, one per role: (username, role in the demo tenant or None for
# the platform admin). Their passwords are new each run, printed once, kept only hashed.
CONSOLE_USERS = (
    ("operator", None),
    ("demo-admin", "tenant-admin"),
    ("demo-developer", "developer"),
    ("demo-viewer", "viewer"),
)
# The first region's controllers (active and standby); every other region runs one,
# ``controller-<region>``: two cores run the brokers and mirror workers of every region.
CONTROLLERS = ("controller-1", "controller-2")
DATABUS_CONFIG = "demo-app"
DATABUS_STREAMS = {
    "events": {"topic": f"{TENANT}.{TOPIC}", "key_field": "customer"},
    "events-ppe": {"topic": f"{TENANT}.{TOPIC}", "lane": LANE},
}


RESTARTS_PER_MINUTE = 5


@dataclass
class Child:
    """A process of the demo: how to start it again, and when it was restarted."""

    args: tuple[str, ...]
    process: subprocess.Popen[bytes]
    restarts: list[float] = field(default_factory=list)


@dataclass
class Platform:
    """The child processes of the demo and where their logs go.

    Every child runs through ``dataplane.lifeline`` (brokers get the lifeline from the
    controller's provisioner), so all of them stop when the demo ends, even by SIGKILL.
    Once the platform is up, ``supervise()`` restarts a child that exited (the standby
    controller takes over meanwhile); one exiting more than ``RESTARTS_PER_MINUTE`` times
    a minute stops the demo with its log.
    """

    data_dir: Path
    api_port: int
    # The regions' names, the first one the demo tenant's home (its topics live there).
    regions: list[str] = field(default_factory=lambda: DEFAULT_REGIONS.split(","))
    children: dict[str, Child] = field(default_factory=dict)
    # The console's demo users: (role, username, password), passwords new each run.
    console_users: list[tuple[str, str, str]] = field(default_factory=list)
    # Set by the first stop signal, before anything else runs: from then on a child that
    # exits is one being stopped, never one to start again.
    stopping: bool = False

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def home(self) -> str:
        return self.regions[0]

    def controllers(self, region: str) -> tuple[str, ...]:
        return CONTROLLERS if region == self.home else (f"controller-{region}",)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "MERIDIAN_DATABASE_URL": f"sqlite:///{self.data_dir / 'controlplane.sqlite3'}",
            "MERIDIAN_CELERY_BROKER_URL": "filesystem://",
            "MERIDIAN_CELERY_QUEUE_DIR": str(self.data_dir / "celery-queue"),
            "MERIDIAN_IDENTITY": "local",
            # Keys and secrets apart from the database a backup would copy.
            "MERIDIAN_LOCAL_ISSUER_KEY_FILE": str(self.data_dir / "secrets" / "local-issuer-kek"),
            "MERIDIAN_INTERNAL_CLIENT_SECRET_FILE": str(
                self.data_dir / "secrets" / "internal-client-secret"
            ),
            "MERIDIAN_DATA_DIR": str(self.data_dir / "brokers"),
            # Parquet exports under <data dir>/exports/<tenant>/, index files beside them.
            "MERIDIAN_EXPORT_ALLOWED_URIS": f"{self.data_dir / 'exports'}/{{tenant}}/",
            "MERIDIAN_INDEX_ROOT": str(self.data_dir / "indexes"),
            "MERIDIAN_API_BASE_URL": self.api_url,
            "MERIDIAN_RECONCILE_INTERVAL_S": "15",
            # Brokers verify every call's token against the local issuer's JWKS.
            "MERIDIAN_BROKER_AUTH": "1",
        }

    def spawn(self, name: str, module: str, *args: str) -> None:
        """Run ``python -m module *args`` as ``name``, watching the lifeline."""
        self.children[name] = Child((module, *args), self._start(name, (module, *args)))

    def _start(self, name: str, args: tuple[str, ...]) -> subprocess.Popen[bytes]:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "dataplane.lifeline", *args],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=lifeline.pass_fds(),
            )

    def pid(self, name: str) -> int:
        return self.children[name].process.pid

    def check_children(self) -> None:
        """While the platform starts, any child exiting stops the demo with its log."""
        for name, child in self.children.items():
            if child.process.poll() is not None:
                raise SystemExit(self._exited(name, child))

    def supervise(self) -> None:
        """Once the platform runs: restart children that exited, unless the demo is
        stopping (the children exit then because they are being stopped)."""
        for name, child in self.children.items():
            if self.stopping or child.process.poll() is None:
                continue
            now = time.monotonic()
            child.restarts = [t for t in child.restarts if now - t < 60] + [now]
            if len(child.restarts) > RESTARTS_PER_MINUTE:
                raise SystemExit(self._exited(name, child) + "\n(restarting too often)")
            print(f"==> {name} exited with {child.process.returncode}; restarting it", flush=True)
            child.process = self._start(name, child.args)

    def _exited(self, name: str, child: Child) -> str:
        log = self.data_dir / "logs" / f"{name}.log"
        tail = log.read_text(errors="replace")[-3000:]
        return f"{name} exited with {child.process.returncode}:\n{tail}"

    def stop(self) -> None:
        self.stopping = True
        processes = [child.process for child in self.children.values()]
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class Api:
    """A tiny JSON client for the REST API."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.token = token

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"{method} {path}: HTTP {exc.code} {exc.read().decode()}") from exc
        return json.loads(raw) if raw else None


def wait_for(what: str, check: Callable[[], T], platform: Platform, timeout_s: float = 90) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        platform.check_children()
        try:
            value = check()
        except (urllib.error.URLError, ConnectionError, SystemExit):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what} (logs in {platform.data_dir}/logs)")
        time.sleep(0.1)


def prepare_database(platform: Platform) -> str:
    """Migrate the SQLite database, give the console's demo users a new password each
    (``platform.console_users``) and return a platform-admin token of the local issuer."""
    os.environ.update(platform.env())
    import django

    django.setup()
    from django.core.management import call_command

    from controlplane.accounts.identity import LocalIdentity, get_identity
    from controlplane.accounts.services import set_local_password
    from controlplane.core.actors import Actor
    from controlplane.core.choices import PLATFORM_ADMIN_ROLE

    call_command("migrate", verbosity=0)
    for username, role in CONSOLE_USERS:
        password = secrets.token_urlsafe(12)
        operator = role is None
        set_local_password(username, password, platform_admin=operator, actor=Actor.system("demo"))
        platform.console_users.append((role or PLATFORM_ADMIN_ROLE, username, password))
    identity = get_identity()
    assert isinstance(identity, LocalIdentity)
    return identity.issue_token(
        subject="demo-operator",
        username="operator",
        realm_roles=[PLATFORM_ADMIN_ROLE],
        ttl_s=7 * 24 * 3600,
    )


def start_processes(platform: Platform) -> None:
    (platform.data_dir / "celery-queue").mkdir(exist_ok=True)
    platform.spawn(
        "api",
        "waitress",
        "--host=127.0.0.1",
        f"--port={platform.api_port}",
        # Requests that wait (a Databus watch's long poll, a broker's answer, SQLite's
        # write lock) hold a thread each: enough threads and connections that clients
        # polling for a result (the console, Terraform's provider) never queue behind
        # them, and idle keep-alive connections given back after a minute.
        "--threads=16",
        "--connection-limit=500",
        "--channel-timeout=60",
        "controlplane.wsgi:application",
    )
    schedule = platform.data_dir / "celerybeat-schedule"
    platform.spawn(
        "worker",
        "celery",
        "-A",
        "controlplane",
        "worker",
        "--beat",
        f"--schedule={schedule}",
        "--pool=threads",
        "--concurrency=4",
        "--loglevel=INFO",
    )


def build_platform(platform: Platform, api: Api) -> dict[str, Any]:
    """Regions, clusters, tenant, topic, mirror links and service account, all through the
    REST API."""
    for region in platform.regions:
        start_region(platform, api, region)
    names = " and ".join(f"'{region}'" for region in platform.regions)
    print(f"==> regions {names}, each with a cluster '{CLUSTER}' of 3 local brokers; "
          f"'{platform.home}' with two controllers (active and standby) ...")  # fmt: skip
    for region in platform.regions:
        wait_for(f"3 ready brokers in {region}", _brokers_ready(api, region), platform, 180)
    # The demo tenant may use the other regions too: mirror links need both ends.
    tenant = {"slug": TENANT, "name": "Demo", "home_region": platform.home}
    api.call("POST", "/api/v1/tenants", tenant | {"regions": platform.regions[1:]})
    wait_for("tenant ready", lambda: _status(api, f"/api/v1/tenants/{TENANT}") == "ready", platform)
    started = time.monotonic()
    api.call(
        "POST",
        "/api/v1/topics",
        {"tenant": TENANT, "name": TOPIC, "partitions": 6, "replication_factor": 3},
    )
    path = f"/api/v1/topics/{TENANT}.{TOPIC}"
    wait_for("topic ready", lambda: _status(api, path) == "ready", platform)
    ready_s = time.monotonic() - started
    mirrors = [mirror_topic(api, platform.home, region) for region in platform.regions[1:]]
    # Not waited for: it is ready long before the steady traffic starts writing to it.
    history = {"tenant": TENANT, "name": HISTORY_TOPIC, **HISTORY_CONFIG}
    api.call("POST", "/api/v1/topics", history)
    on_history = {"tenant": TENANT, "topic": HISTORY_TOPIC}
    api.call("POST", "/api/v1/indexes",
             {**on_history, "name": HISTORY_INDEX, "fields": HISTORY_FIELDS[:1]})  # fmt: skip
    api.call("POST", "/api/v1/exports", {**on_history, "name": HISTORY_EXPORT,
             "fields": HISTORY_FIELDS, "partition_by": ["date"]})  # fmt: skip
    account = api.call(
        "POST",
        "/api/v1/service-accounts",
        {"tenant": TENANT, "name": "orders-app", "role": "developer"},
    )
    # A lane for test traffic: records tagged "ppe" go to demo.orders~ppe, made on first use.
    api.call("POST", "/api/v1/lanes", {"tenant": TENANT, "name": LANE, "orphan_policy": "hold"})
    invite_console_members(api)
    return {"topic_ready_s": ready_s, "account": account, "mirrors": mirrors}


def start_region(platform: Platform, api: Api, region: str) -> None:
    """The region, its controllers and its cluster of three local brokers. The home
    region's cluster tiers to the object store, a folder of the demo's data, so topics
    made with remote_storage keep their sealed segments there."""
    api.call(
        "POST", "/api/v1/regions", {"name": region, "display_name": f"{region} (this machine)"}
    )
    for name in platform.controllers(region):
        platform.spawn(name, "controlplane.controller", "--region", region, "--id", name)
    cluster: dict[str, Any] = {
        "region": region,
        "name": CLUSTER,
        "provisioner": "local",
        "broker_count": 3,
    }
    if region == platform.home:
        (platform.data_dir / "objects").mkdir(mode=0o700, exist_ok=True)
        cluster["remote_store_uri"] = str(platform.data_dir / "objects")
    api.call("POST", "/api/v1/clusters", cluster)


def mirror_topic(api: Api, home: str, region: str) -> str:
    """A two-way mirror link of the demo topic between the home region and ``region``,
    copying from the start of its log; its name."""
    name = link_name(region)
    link = {
        "tenant": TENANT,
        "name": name,
        "source_region": home,
        "target_region": region,
        "direction": "two-way",
        "topics": [TOPIC],
        "start_position": "earliest",
    }
    api.call("POST", "/api/v1/mirrors", link)
    return name


def link_name(region: str) -> str:
    """The demo's mirror link to ``region`` (at most ``MAX_LINK_NAME`` characters)."""
    return f"{TOPIC}-{region}"


def invite_console_members(api: Api) -> None:
    """The console's demo users with a tenant role become members of the demo tenant,
    through the REST API (their passwords are set in ``prepare_database``)."""
    for username, role in CONSOLE_USERS:
        if role is not None:
            member = {"tenant": TENANT, "username": username, "role": role}
            api.call("POST", "/api/v1/members", member | {"email": f"{username}@example.com"})


def _brokers_ready(api: Api, region: str) -> Callable[[], bool]:
    return lambda: _ready_brokers(api, region) == 3


def _ready_brokers(api: Api, region: str) -> int:
    brokers = api.call("GET", f"/api/v1/brokers?region={region}")["results"]
    return sum(1 for b in brokers if b["phase"] == "ready")


def _status(api: Api, path: str) -> str:
    return str(api.call("GET", path)["status"])


def service_token(api_url: str, account: dict[str, Any]) -> str:
    body = json.dumps(
        {
            "grant_type": "client_credentials",
            "client_id": account["client_id"],
            "client_secret": account["client_secret"],
        }
    ).encode()
    request = urllib.request.Request(
        api_url + "/api/v1/auth/token",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["access_token"])


def exercise_topic(
    bootstrap: str, records: int, api_url: str, account: dict[str, Any]
) -> tuple[float, int]:
    """Produce ``records`` keyed records (acks=all) and consume them with a group, as the
    service account (client credentials at the local issuer); (seconds, consumed)."""
    from dataplane.client import Consumer, Producer
    from dataplane.client.auth import ClientCredentials

    credentials = ClientCredentials(
        api_url + "/api/v1/auth/token", account["client_id"], account["client_secret"]
    )
    topic = f"{TENANT}.{TOPIC}"
    started = time.monotonic()
    # acks=all: every in-sync replica of the RF=3 topic has a record before it is acked
    with Producer(bootstrap, acks="all", credentials=credentials) as producer:
        for i in range(records):
            producer.send(topic, value=f"order-{i}".encode(), key=f"customer-{i % 97}".encode())
        producer.flush()
    seen = 0
    with Consumer(
        bootstrap,
        group_id=f"{TENANT}.billing",
        auto_offset_reset="earliest",
        credentials=credentials,
    ) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while seen < records and time.monotonic() < deadline:
            seen += len(consumer.poll(timeout_ms=500))
        consumer.commit()
    return time.monotonic() - started, seen


def broker_addresses(api: Api, region: str, field: str = "address") -> str:
    """The region's brokers' ``field``, comma-separated: ``address`` (gRPC) or
    ``kafka_address`` (Kafka's protocol)."""
    brokers = api.call("GET", f"/api/v1/brokers?region={region}")["results"]
    return ",".join(b[field] for b in brokers)


def start_databus(platform: Platform, api: Api, account: dict[str, Any], bootstrap: str) -> str:
    """The Databus configuration and its agent, as the service account; the agent's HTTP
    address once it serves and a first write went through it."""
    api.call(
        "POST",
        "/api/v1/databus-configs",
        {"tenant": TENANT, "name": DATABUS_CONFIG, "document": {"streams": DATABUS_STREAMS}},
    )
    secret = platform.data_dir / "secrets" / "databus-client-secret"
    secret.parent.mkdir(mode=0o700, exist_ok=True)
    secret.write_text(account["client_secret"])
    os.chmod(secret, 0o600)
    http_port, grpc_port = free_ports(2)
    platform.spawn(
        "databus",
        "databus",
        f"--config={DATABUS_CONFIG}",
        f"--api={platform.api_url}",
        f"--bootstrap={bootstrap}",
        f"--token-url={platform.api_url}/api/v1/auth/token",
        f"--client-id={account['client_id']}",
        f"--client-secret-file={secret}",
        f"--data-dir={platform.data_dir / 'databus'}",
        f"--http=127.0.0.1:{http_port}",
        f"--grpc=127.0.0.1:{grpc_port}",
    )
    address = f"127.0.0.1:{http_port}"
    wait_for("the Databus agent", lambda: _databus_ready(address), platform)
    token = (platform.data_dir / "databus" / "ingest-token").read_text().strip()
    body = json.dumps({"records": [{"value": {"customer": "c-1", "item": "tea"}}]}).encode()
    request = urllib.request.Request(
        f"http://{address}/v1/streams/events/records",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        json.loads(response.read())
    return address


def _databus_ready(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/healthz", timeout=2) as response:
            return bool(json.loads(response.read())["status"] == "ok")
    except (OSError, ValueError, KeyError):
        return False


def print_summary(
    platform: Platform,
    admin_token: str,
    built: dict[str, Any],
    app_token: str,
    bootstraps: dict[str, str],
    databus: str,
    kafka_bootstrap: str,
) -> None:
    account = built["account"]
    bootstrap = bootstraps[platform.home]
    url = platform.api_url
    users = "\n".join(
        f"  {role:<15}{username:<16}password {password}"
        for role, username, password in platform.console_users
    )
    controllers = ", ".join(f"{name} (pid {platform.pid(name)})" for name in CONTROLLERS)
    mirrors = mirrors_text(platform, built["mirrors"], bootstraps)
    print(
        f"""
Meridian is running.
  API            {url}/api/v1/            (OpenAPI: {url}/api/v1/openapi.json)
  brokers        {bootstrap}   (region {platform.home}, home of tenant '{TENANT}')
  Kafka          {kafka_bootstrap}   (Kafka's protocol: SASL/PLAIN as a service account)
  data and logs  {platform.data_dir}
  object store   {platform.data_dir / "objects"}   (topics with remote_storage=true tier there)
  controllers    {controllers}
                 (one active, one standby: kill the active one and the other takes over;
                 the demo starts the dead one again as the new standby)
{regions_text(platform, bootstraps)}
Console         {url}/console/    (sign in as one of these; passwords are new each run)
{users}

Platform-admin token (local issuer, 7 days):
  export ADMIN_TOKEN={admin_token}

Service account {account["client_id"]} (role developer in tenant '{TENANT}'):
  client secret  {account["client_secret"]}
  export TOKEN={app_token}

Try:
  curl -s -H "Authorization: Bearer $TOKEN" {url}/api/v1/topics/{TENANT}.{TOPIC}
  curl -s -H "Authorization: Bearer $TOKEN" {url}/api/v1/quotas/{TENANT}
  curl -s -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \\
       -d '{{"name": "payments", "partitions": 3}}' {url}/api/v1/topics
  curl -s -d grant_type=client_credentials -d client_id={account["client_id"]} \\
       -d client_secret={account["client_secret"]} {url}/api/v1/auth/token
  export MERIDIAN_BOOTSTRAP={bootstrap}
  # brokers require a token: --token (or MERIDIAN_TOKEN), or client credentials
  .venv/bin/meridian --token "$TOKEN" topics describe {TENANT}.{TOPIC}
  echo hello | .venv/bin/meridian --token "$TOKEN" produce {TENANT}.{TOPIC}
  .venv/bin/meridian --token-url {url}/api/v1/auth/token --client-id {account["client_id"]} \\
       --client-secret {account["client_secret"]} \\
       consume {TENANT}.{TOPIC} --from-beginning --max-messages 5
  .venv/bin/meridian --token "$TOKEN" groups describe {TENANT}.billing
  # Kafka clients: SASL/PLAIN with the service account's client id and secret
  export KAFKA_BOOTSTRAP={kafka_bootstrap}
  {kafka_example(account)}

{mirrors}Lane '{LANE}' (test traffic beside the trunk; its lane topic is made on first use):
  echo hello | .venv/bin/meridian --token "$TOKEN" produce {TENANT}.{TOPIC} --lane {LANE}
  .venv/bin/meridian --token "$TOKEN" consume {TENANT}.{TOPIC} --lane {LANE} \
       --group {TENANT}.tester --from-beginning --max-messages 1
  .venv/bin/meridian --api {url} --token "$TOKEN" lanes list

Tiered storage: {TENANT}.{HISTORY_TOPIC} seals a segment at 1 MiB or 1 minute and uploads it
(kept on the brokers' disks a minute more); the steady producer writes to it:
  .venv/bin/meridian --token "$TOKEN" topics describe {TENANT}.{HISTORY_TOPIC}
  ls -R {platform.data_dir / "objects"}

Spark: index '{HISTORY_INDEX}' on its values' user, export '{HISTORY_EXPORT}' to Parquet
(a query answers from the index plus a scan of what it does not cover; a build or a run
is a Spark job, about half a minute):
  .venv/bin/meridian --api {url} --token "$TOKEN" index query {HISTORY_INDEX} --field user --value 3
  .venv/bin/meridian --api {url} --token "$TOKEN" indexes build {HISTORY_INDEX}
  .venv/bin/meridian --api {url} --token "$TOKEN" exports run {HISTORY_EXPORT}
  .venv/bin/meridian --api {url} --token "$TOKEN" exports describe {HISTORY_EXPORT}
  ls -R {platform.data_dir / "exports"}

Databus agent, config '{DATABUS_CONFIG}' (events -> {TENANT}.{TOPIC}, events-ppe -> lane {LANE}):
  export INGEST_TOKEN=$(cat {platform.data_dir / "databus" / "ingest-token"})
  curl -s -H "Authorization: Bearer $INGEST_TOKEN" -H 'Content-Type: application/json' \\
       -d '{{"records": [{{"value": {{"customer": "c-7", "item": "coffee"}}}}]}}' \\
       http://{databus}/v1/streams/events/records
  curl -s http://{databus}/healthz
  .venv/bin/meridian --api {url} --token "$TOKEN" databus agents
"""
    )


def kafka_example(account: dict[str, Any]) -> str:
    """A confluent-kafka producer (librdkafka) writing one record to the demo topic over
    Kafka's protocol at ``$KAFKA_BOOTSTRAP``: the brokers exchange the service account's
    client id and secret (SASL/PLAIN) for a token at the local issuer."""
    config = {
        "bootstrap.servers": "$KAFKA_BOOTSTRAP",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": account["client_id"],
        "sasl.password": account["client_secret"],
    }
    code = (
        f"from confluent_kafka import Producer; p = Producer({config!r}); "
        f"p.produce('{TENANT}.{TOPIC}', b'hello from Kafka'); print(p.flush(10), 'left')"
    )
    return f'.venv/bin/python -c "{code}"'


def regions_text(platform: Platform, bootstraps: dict[str, str]) -> str:
    """The other regions' brokers and controllers (the summary's first block)."""
    lines = []
    for region in platform.regions[1:]:
        controllers = ", ".join(
            f"{n} (pid {platform.pid(n)})" for n in platform.controllers(region)
        )
        lines.append(f"  region {region:<7} brokers {bootstraps[region]}\n"
                     f"                 controller {controllers}")  # fmt: skip
    return "\n".join(lines) + ("\n" if lines else "")


def mirrors_text(platform: Platform, mirrors: list[str], bootstraps: dict[str, str]) -> str:
    """The mirror links' commands: lag per partition, a record each way."""
    url, topic = platform.api_url, f"{TENANT}.{TOPIC}"
    blocks = []
    for name, region in zip(mirrors, platform.regions[1:], strict=True):
        there, home = bootstraps[region], platform.home
        blocks.append(f"""Mirror '{name}': {topic} copied both ways between {home} and {region}
(a record produced in either region shows up in the other; lag per partition):
  .venv/bin/meridian --api {url} --token "$TOKEN" mirrors describe {name}
  echo from-{region} | .venv/bin/meridian --bootstrap {there} --token "$TOKEN" produce {topic}
  .venv/bin/meridian --bootstrap {there} --token "$TOKEN" consume {topic} \\
       --from-beginning --max-messages 5
""")
    return "".join(f"{block}\n" for block in blocks)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="./dev run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="default: a new temporary directory")
    parser.add_argument("--api-port", type=int, default=8000)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--exit", action="store_true", help="stop once the demo has run")
    parser.add_argument(
        "--regions",
        type=region_names,
        default=region_names(DEFAULT_REGIONS),
        help="comma-separated region names, the first the demo tenant's home (default: "
        f"{DEFAULT_REGIONS}; one name runs a single region, without mirrors)",
    )
    return parser.parse_args(argv)


def region_names(text: str) -> list[str]:
    """``--regions``: distinct slugs, at least one."""
    names = [name.strip() for name in text.split(",")]
    if not all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) and len(n) <= 32 for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: region names are lowercase slugs")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r}: a region is named twice")
    for name in names[1:]:
        if len(link_name(name)) > MAX_LINK_NAME:
            raise argparse.ArgumentTypeError(
                f"{name!r}: too long for the demo's mirror link to it, {link_name(name)!r} "
                f"(link names have at most {MAX_LINK_NAME} characters: a region after the "
                f"first has at most {MAX_LINK_NAME - len(link_name(''))})"
            )
    return names


def private_data_dir(path: Path) -> Path:
    """The demo's data directory, made or narrowed to 0700: it holds the database, the
    issuer's keys and the tenants' records. A shared directory (sticky, like ``/tmp``,
    or another user's) is refused rather than narrowed."""
    info = private_dir(path).stat()
    if info.st_mode & stat.S_ISVTX or info.st_uid != os.getuid():
        raise SystemExit(f"--data-dir {path} is a shared directory: name one of its own")
    os.chmod(path, 0o700)
    return path.resolve()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Everything the demo and its children write is this user's alone, whatever the
    # caller's umask: logs, queues and records as well as keys.
    os.umask(0o077)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="meridian-"))
    platform = Platform(private_data_dir(data_dir), args.api_port, args.regions)
    handle_stop_signals(platform)
    lifeline.cut_on_exit()
    print(f"==> control plane in {platform.data_dir} (SQLite, local token issuer)")
    admin_token = prepare_database(platform)
    try:
        start_processes(platform)
        api = Api(platform.api_url, admin_token)
        wait_for("the API", lambda: api.call("GET", "/api/v1/regions") is not None, platform)
        print(f"==> API at {platform.api_url}, Celery worker (filesystem transport)")
        built = build_platform(platform, api)
        client_id = built["account"]["client_id"]
        print(f"==> tenant '{TENANT}', topic {TENANT}.{TOPIC} (6 partitions) ready in "
              f"{built['topic_ready_s']:.2f} s, service account {client_id}")  # fmt: skip
        app_token = service_token(platform.api_url, built["account"])
        bootstraps = {region: broker_addresses(api, region) for region in platform.regions}
        bootstrap = bootstraps[platform.home]
        kafka_bootstrap = broker_addresses(api, platform.home, "kafka_address")
        seconds, seen = exercise_topic(bootstrap, args.records, platform.api_url, built["account"])
        print(f"==> produced {args.records:,} records and consumed {seen:,} with group "
              f"{TENANT}.billing in {seconds:.2f} s")  # fmt: skip
        if seen != args.records:
            raise SystemExit(f"consumed {seen} of {args.records} records")
        databus = start_databus(platform, api, built["account"], bootstrap)
        print(f"==> Databus agent at http://{databus} (config {DATABUS_CONFIG})")
        print_summary(platform, admin_token, built, app_token, bootstraps, databus, kafka_bootstrap)
        if not args.exit:
            history = f"{TENANT}.{HISTORY_TOPIC}"
            start_traffic(bootstrap, platform.api_url, built["account"], f"{TENANT}.{TOPIC}",
                          history=history)  # fmt: skip
            print(f"==> steady traffic on {TENANT}.{TOPIC} (some on {history}): a producer, "
                  f"and group {TENANT}.analytics consuming slower (its lag grows)")  # fmt: skip
            print("Ctrl-C stops everything.")
            while True:
                platform.supervise()
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # a second signal must not cut the cleanup
        print("==> stopping")
        stop_traffic()
        platform.stop()
        _stop_provisioned(platform)
    return 0


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def handle_stop_signals(platform: Platform) -> None:
    """Ctrl-C, SIGTERM and SIGHUP stop the demo alike: the platform is marked stopping
    first (``supervise`` restarts nothing from then on, whatever exits), then
    KeyboardInterrupt unwinds to the cleanup. A SIGINT the demo was started ignoring
    (a background job) stays ignored."""

    def stop(signum: int, frame: object) -> None:
        platform.stopping = True
        raise KeyboardInterrupt

    for signum in STOP_SIGNALS:
        if signum != signal.SIGINT or signal.getsignal(signum) is signal.default_int_handler:
            signal.signal(signum, stop)


def _stop_provisioned(platform: Platform) -> None:
    """The local provisioner's brokers and mirror workers run in sessions of their own
    (they outlive a controller); the demo owns them, so it stops them."""
    from controlplane.mirrors.models import MirrorWorker
    from controlplane.regions.models import Broker

    started = [*Broker.objects.values_list("pid", flat=True),
               *MirrorWorker.objects.values_list("pid", flat=True)]  # fmt: skip
    pids = [pid for pid in started if pid is not None]
    for pid in pids:
        for signum in (signal.SIGTERM, signal.SIGCONT):  # a frozen broker must wake to stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
    deadline = time.monotonic() + 20
    for pid in pids:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
