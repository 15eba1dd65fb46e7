"""The README's run command: the whole platform with embedded defaults (SQLite, the
local issuer, a Celery worker on the filesystem transport; regions east, with two
controllers, and west, with one, each with three local brokers; demo.orders mirrored both
ways between them), then what it prints must work, a controller's death must not end it,
and however the demo ends, everything it started ends too."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import requests

from dataplane.client import Consumer
from dataplane.client.auth import StaticToken
from tests.support.demo import Demo, processes_of, start_demo, wait_gone


def _get(url: str, token: str) -> dict[str, object]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def _controller_pids(output: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r"(controller-\d) \(pid (\d+)\)", output)}


def _post(url: str, token: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def _wait_ready(url: str, token: str, timeout_s: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while (topic := _get(url, token))["status"] != "ready" and time.monotonic() < deadline:
        time.sleep(0.2)
    return topic


def _check_console_sign_in(output: str) -> None:
    """The printed console URL and users: one per role, and the developer signs in at
    the local issuer's form and sees their role in the demo tenant."""
    console = re.search(r"^Console\s+(\S+)", output, re.MULTILINE)
    assert console is not None, output
    printed = re.findall(r"^  (\S+)\s+(\S+)\s+password (\S+)$", output, re.MULTILINE)
    users = {role: (username, password) for role, username, password in printed}
    assert set(users) == {"platform-admin", "tenant-admin", "developer", "viewer"}, output
    browser = requests.Session()
    form = browser.get(console.group(1) + "auth/session", timeout=30)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    username, password = users["developer"]
    signed_in = browser.post(
        form.url,
        {"csrfmiddlewaretoken": csrf.group(1), "username": username, "password": password},
        timeout=30,
    )
    assert signed_in.url == console.group(1) + "auth/session", signed_in.text
    assert username in signed_in.text
    assert "developer" in signed_in.text


def _check_the_second_region(
    output: str, api: str, admin: str, cli: list[str], cli_env: dict[str, str]
) -> None:
    """Region west: its own controller and three brokers, printed; the mirror link of
    demo.orders turns ready and ok, and a record produced in east is read in west with
    the printed command."""
    west = re.search(r"^  region west\s+brokers (\S+)\n\s+controller controller-west \(pid (\d+)\)",
                     output, re.MULTILINE)  # fmt: skip
    assert west is not None, output
    brokers = _get(f"{api}/brokers?region=west", admin)["results"]
    assert sorted(b["address"] for b in brokers) == sorted(west.group(1).split(","))  # type: ignore[index]
    assert "mirrors describe orders-west" in output
    deadline = time.monotonic() + 120
    while (link := _get(f"{api}/mirrors/orders-west", admin))["health"] != "ok":
        assert time.monotonic() < deadline, link
        time.sleep(0.5)
    assert (link["status"], link["direction"]) == ("ready", "two-way"), link
    sent = subprocess.run(
        [*cli, "produce", "demo.orders"], input="east-to-west\n",
        env=cli_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    token = cli[cli.index("--token") + 1]
    assert _read_until(west.group(1), token, b"east-to-west", deadline + 60)


def _check_the_kafka_listeners(output: str, api: str, admin: str) -> None:
    """Every broker of both regions has a Kafka port of its own; the printed Kafka
    bootstrap is east's brokers' Kafka addresses, after the gRPC one, and the printed
    confluent-kafka example signs in with SASL/PLAIN as the demo's service account."""
    brokers: list[dict[str, Any]] = _get(f"{api}/brokers", admin)["results"]  # type: ignore[assignment]
    assert len(brokers) == 6, brokers
    for b in brokers:
        assert b["kafka_port"], b
        assert b["kafka_port"] != b["port"], b
        assert b["kafka_address"] == f"{b['host']}:{b['kafka_port']}", b
    east = [b["kafka_address"] for b in brokers if b["region"] == "east"]
    kafka = re.search(r"^  export KAFKA_BOOTSTRAP=(\S+)$", output, re.MULTILINE)
    assert kafka is not None, output
    assert kafka.group(1).split(",") == east
    assert output.index("export MERIDIAN_BOOTSTRAP=") < kafka.start()
    client_id = re.search(r"^Service account (\S+) ", output, re.MULTILINE)
    secret = re.search(r"^  client secret  (\S+)$", output, re.MULTILINE)
    assert client_id is not None, output
    assert secret is not None, output
    example = next(line for line in output.splitlines() if "confluent_kafka" in line)
    for setting in (
        "'bootstrap.servers': '$KAFKA_BOOTSTRAP'",
        "'security.protocol': 'SASL_PLAINTEXT'",
        "'sasl.mechanism': 'PLAIN'",
        f"'sasl.username': '{client_id.group(1)}'",
        f"'sasl.password': '{secret.group(1)}'",
    ):
        assert setting in example, example


def _read_until(bootstrap: str, token: str, value: bytes, deadline: float) -> bool:
    """Whether a record of ``value`` is read from demo.orders at ``bootstrap`` before
    ``deadline`` (the steady traffic keeps the topic busy: no quiet end to wait for)."""
    with Consumer(
        bootstrap, group_id="demo.west-reader", auto_offset_reset="earliest",
        credentials=StaticToken(token),
    ) as consumer:  # fmt: skip
        consumer.subscribe(["demo.orders"])
        while time.monotonic() < deadline:
            if any(r.value == value for r in consumer.poll(timeout_ms=500)):
                return True
    return False


def test_demo_runs_the_platform_and_what_it_prints_works(tmp_path: Path) -> None:
    """What the demo prints works; it survives each controller's SIGKILL (the standby
    takes over and the dead one is started again); SIGTERM stops every process it
    started; and, started with umask 000, it wrote nothing another user can read."""
    data_dir = tmp_path / "demo"
    demo = start_demo(data_dir, records=2000, umask=0)
    process, api_port, env = demo.process, demo.api_port, demo.env
    try:
        output = demo.read_until("Ctrl-C stops everything", timeout_s=180)
        assert "consumed 2,000 with group demo.billing" in output
        token = re.search(r"export TOKEN=(\S+)", output)
        bootstrap = re.search(r"export MERIDIAN_BOOTSTRAP=(\S+)", output)
        assert token is not None, output
        assert bootstrap is not None, output
        api = f"http://127.0.0.1:{api_port}/api/v1"
        _check_console_sign_in(output)
        topic = _get(f"{api}/topics/demo.orders", token.group(1))
        assert topic["status"] == "ready"
        assert topic["partitions"] == 6
        # The service account's token sees its tenant and nothing else.
        tenants = _get(f"{api}/tenants", token.group(1))
        assert [t["slug"] for t in tenants["results"]] == ["demo"]  # type: ignore[index]
        meridian = str(Path(sys.executable).parent / "meridian")
        cli = [meridian, "--token", token.group(1)]
        cli_env = {**env, "MERIDIAN_BOOTSTRAP": bootstrap.group(1)}
        produced = subprocess.run(
            [*cli, "produce", "demo.orders"], input="from-the-cli\n", env=cli_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        described = subprocess.run(
            [*cli, "topics", "describe", "demo.orders"], env=cli_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert described.returncode == 0, described.stderr
        assert "demo.orders" in described.stdout
        # A tenant's token sees its partitions' sizes, not zeros.
        summary = re.search(r"([\d,]+) records, ([\d,]+) bytes", described.stdout)
        assert summary is not None, described.stdout
        assert int(summary.group(2).replace(",", "")) > 0, described.stdout
        # The printed lane commands: a record produced to lane ppe is read back in the
        # lane (its lane topic made on first use), and the lane is listed.
        lane_produced = subprocess.run(
            [*cli, "produce", "demo.orders", "--lane", "ppe"], input="lane record\n",
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert lane_produced.returncode == 0, lane_produced.stderr
        lane_read = subprocess.run(
            [*cli, "consume", "demo.orders", "--lane", "ppe", "--group", "demo.tester",
             "--from-beginning", "--max-messages", "1"],
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert lane_read.returncode == 0, lane_read.stderr
        assert "lane record" in lane_read.stdout
        listed = subprocess.run(
            [meridian, "--api", f"http://127.0.0.1:{api_port}", "--token", token.group(1),
             "lanes", "list"],
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert "ppe" in listed.stdout
        # The brokers authenticate: without a token the same command is refused.
        anonymous = subprocess.run(
            [meridian, "topics", "describe", "demo.orders"], env=cli_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert anonymous.returncode == 1
        assert "UNAUTHENTICATED" in anonymous.stderr
        admin = re.search(r"export ADMIN_TOKEN=(\S+)", output)
        assert admin is not None, output
        _check_the_kafka_listeners(output, api, admin.group(1))
        # Tiered storage: the cluster's object store is a folder of the demo's data, so a
        # topic with remote_storage is taken and made on the brokers.
        [cluster] = _get(f"{api}/clusters?region=east", admin.group(1))["results"]  # type: ignore[misc]
        assert Path(cluster["remote_store_uri"]).is_dir(), cluster
        assert Path(cluster["remote_store_uri"]).name == "objects", cluster
        assert cluster["remote_store_options_set"] is False
        _post(f"{api}/topics", token.group(1),
              {"name": "tiered", "partitions": 1, "remote_storage": True})  # fmt: skip
        tiered = _wait_ready(f"{api}/topics/demo.tiered", token.group(1), 60)
        assert (tiered["status"], tiered["remote_storage"]) == ("ready", True), tiered
        # The demo's own tiered topic, with segments small enough to be sealed (and so
        # uploaded) within a minute, and the printed command to look at it.
        history = _wait_ready(f"{api}/topics/demo.history", token.group(1), 60)
        assert history["status"] == "ready", history
        assert (
            history["remote_storage"],
            history["max_segment_bytes"],
            history["segment_ms"],
        ) == (True, 2**20, 60_000), history
        assert 'meridian --token "$TOKEN" topics describe demo.history' in output
        assert f"ls -R {cluster['remote_store_uri']}" in output
        described_history = subprocess.run(
            [*cli, "topics", "describe", "demo.history"], env=cli_env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert described_history.returncode == 0, described_history.stderr
        settings = dict(
            line.split() for line in described_history.stdout.splitlines()
            if len(line.split()) == 2
        )  # fmt: skip
        assert (settings["max_segment_bytes"], settings["segment_ms"]) == ("1048576", "60000")
        # Its index answers the printed query (complete: from a scan while nothing is
        # built), and its Parquet export is declared, run by hand.
        assert "index query history-by-user --field user --value 3" in output
        sent = subprocess.run(
            [*cli, "produce", "demo.history"], input='{"event": -1, "user": 3}\n',
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        queried = subprocess.run(
            [*cli, "--api", f"http://127.0.0.1:{api_port}", "index", "query",
             "history-by-user", "--field", "user", "--value", "3", "--json"],
            env=cli_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert queried.returncode == 0, queried.stderr
        answer = json.loads(queried.stdout)
        assert answer["from_index"] == 0, answer
        found = [json.loads(r["value_text"]) for r in answer["records"]]
        assert {"event": -1, "user": 3} in found, answer
        assert all(f["user"] == 3 for f in found), answer
        export = _get(f"{api}/exports/history-parquet", token.group(1))
        assert (export["topic"], export["schedule_kind"]) == ("demo.history", "manual"), export
        _check_the_second_region(output, api, admin.group(1), cli, cli_env)
        # Killing each controller in turn kills the active one once: the platform goes on,
        # a topic created after each kill is placed, led and served.
        controllers = _controller_pids(output)
        assert sorted(controllers) == ["controller-1", "controller-2"], output
        for n, (name, pid) in enumerate(sorted(controllers.items())):
            os.kill(pid, signal.SIGKILL)
            restarted = demo.read_until(f"{name} exited", timeout_s=30)
            assert "restarting it" in restarted
            topic_name = f"after-kill-{n}"
            _post(f"{api}/topics", admin.group(1),
                  {"tenant": "demo", "name": topic_name, "partitions": 2,
                   "replication_factor": 3})  # fmt: skip
            topic = _wait_ready(f"{api}/topics/demo.{topic_name}", token.group(1), 60)
            assert topic["status"] == "ready", topic
            sent = subprocess.run(
                [*cli, "produce", f"demo.{topic_name}"], input="after the kill\n",
                env=cli_env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert sent.returncode == 0, sent.stderr
        assert process.poll() is None
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            rest = process.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, rest
    assert "stopping" in rest
    assert processes_of(data_dir) == [], "processes of the demo still running"
    _check_private_files(data_dir)


def _check_private_files(data_dir: Path) -> None:
    """What the demo left on disk is its user's alone: the data directory, the
    database, the issuer's key-encryption key, the internal clients' secrets, logs,
    queues and every broker's records."""
    paths = [data_dir, *data_dir.rglob("*")]
    readable = [
        f"{p.relative_to(data_dir)} {stat.filemode(p.lstat().st_mode)}"
        for p in paths
        if p.lstat().st_mode & 0o077
    ]
    assert readable == [], "readable or writable by others"
    names = {p.relative_to(data_dir).as_posix() for p in paths}
    assert {"controlplane.sqlite3", "secrets/local-issuer-kek", "brokers"} <= names
    for region in ("east", "west"):  # each region's brokers under their region
        assert any(n.startswith(f"brokers/{region}/main/broker-1/") for n in names), sorted(names)
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert b"PRIVATE KEY" not in (data_dir / "controlplane.sqlite3").read_bytes()


# How long every process of the demo may take to stop once the lifeline is cut: brokers
# stop cleanly, and a mirror worker flushes and closes its producer (up to 10 s each)
# while the brokers of both regions are stopping too. A bound for a loaded machine, not a
# measure: nothing is asserted about how fast they go, only that they all do.
STOP_TIMEOUT_S = 180


def _running(data_dir: Path) -> Counter[str]:
    """The demo's processes by kind: the module each runs (``mirror``,
    ``dataplane.broker``, ``controlplane.controller``, ...)."""
    kinds: Counter[str] = Counter()
    for line in processes_of(data_dir):
        try:
            argv = Path(f"/proc/{line.split(':')[0]}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        modules = [argv[i + 1].decode() for i, arg in enumerate(argv[:-1]) if arg == b"-m"]
        # ``python -m dataplane.lifeline MODULE``: the module it runs
        if modules == ["dataplane.lifeline"]:
            modules = [argv[argv.index(b"dataplane.lifeline") + 1].decode()]
        kinds[modules[0] if modules else argv[0].decode()] += 1
    return kinds


def _everything_up(demo: Demo) -> Counter[str] | None:
    """The running processes once the mirror link is copying (``health`` ok: a worker
    per leg, one in each region, past its start) and both regions' brokers and
    controllers run; None before."""
    status, link = demo.call("GET", "/mirrors/orders-west", token=demo.admin_token)
    kinds = _running(demo.data_dir)
    wanted = {"mirror": 2, "dataplane.broker": 6, "controlplane.controller": 3}
    if status != 200 or link["health"] != "ok":
        return None
    return kinds if all(kinds[k] >= n for k, n in wanted.items()) else None


def test_demo_killed_with_sigkill_takes_everything_with_it(tmp_path: Path) -> None:
    """The demo's children notice its death through the lifeline and stop cleanly: the
    API server, the Celery worker, the controllers and brokers of both regions and the
    mirror workers, all running when it is killed."""
    data_dir = tmp_path / "demo"
    demo = start_demo(data_dir, records=100)
    process = demo.process
    try:
        demo.read_until("Ctrl-C stops everything", timeout_s=180)
        demo.drain_in_background()
        deadline = time.monotonic() + 180
        while _everything_up(demo) is None:
            assert process.poll() is None, demo.logs()
            assert time.monotonic() < deadline, f"{_running(data_dir)}\n{demo.logs()}"
            time.sleep(0.5)
    finally:
        process.kill()
        process.wait(timeout=30)
    left = wait_gone(data_dir, timeout_s=STOP_TIMEOUT_S)
    assert left == [], f"processes of the demo still running: {left}\n{demo.logs()}"
