"""Running exports: the job launched on a private spec file, its answer recorded, one
run per export at a time, the schedule. The Spark job itself is stood in for by a small
script at the launcher's one seam (``jobs.job_command``); the real jobs are
``spark.jobs.export`` / ``spark.jobs.index``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controlplane.exports import jobs, running, services, tasks
from controlplane.exports.models import Export, ExportRun
from controlplane.exports.schedule import cron_due
from controlplane.tenants.models import Tenant
from controlplane.topics.models import PartitionAssignment
from spark.jobs.spec import ExportSpec, JobResult
from tests.controlplane.exports.support import SYSTEM, tiered_cluster, tiered_topic
from tests.support.brokers import REPO_ROOT
from tests.support.controlplane import make_tenant, wait_until

FAKE_JOB = textwrap.dedent(
    """
    import json, os, stat, sys, time
    spec_path = sys.argv[sys.argv.index("--spec") + 1]
    mode = stat.S_IMODE(os.stat(spec_path).st_mode)
    dir_mode = stat.S_IMODE(os.stat(os.path.dirname(spec_path)).st_mode)
    spec = json.load(open(spec_path))
    behaviour = os.environ.get("FAKE_JOB", "succeed")
    with open(os.environ["FAKE_JOB_SEEN"], "w") as seen:
        json.dump({"spec": spec, "mode": mode, "dir_mode": dir_mode, "path": spec_path}, seen)
    print("spark says hello")  # a job's own output before its result
    if behaviour == "sleep":
        time.sleep(60)
    if behaviour == "crash":
        print("Traceback: boom", file=sys.stderr)
        sys.exit(3)
    if behaviour == "fail":
        print(json.dumps({"status": "failed", "error": "bad records"}))
        sys.exit(1)
    print(json.dumps({"status": "succeeded", "manifest_version": 2, "rows": 10,
                      "bytes": 2048, "files": 2, "dead_letter_rows": 1,
                      "covered": {spec["topic"] + "/0": 7, spec["topic"] + "/1": 3}}))
    """
)


@pytest.fixture
def fake_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any) -> Path:
    """The launcher runs FAKE_JOB instead of the Spark job; returns where it notes what
    it was given."""
    script = tmp_path / "fake_job.py"
    script.write_text(FAKE_JOB)
    seen = tmp_path / "seen.json"
    monkeypatch.setenv("FAKE_JOB_SEEN", str(seen))
    monkeypatch.setattr(
        jobs, "job_command", lambda module, spec: [sys.executable, str(script), "--spec", str(spec)]
    )
    settings.DATA_DIR = str(tmp_path / "data")
    return seen


@pytest.fixture
def acme(db: None, settings: Any, tmp_path: Path) -> Tenant:
    settings.EXPORT_ALLOWED_URIS = [f"{tmp_path}/exports/{{tenant}}/"]
    tiered_cluster(tmp_path / "store")
    tenant = make_tenant("acme")
    tiered_topic(tenant)
    return tenant


def _export(tenant: Tenant, **kwargs: Any) -> Export:
    return services.create_export(tenant, name="daily", topic="orders", actor=SYSTEM, **kwargs)


def _due(now: datetime) -> list[int]:
    return running.enqueue_due_exports(now, actor=SYSTEM, enqueue=lambda e, r: None)


def _queued(export: Export, monkeypatch: pytest.MonkeyPatch) -> ExportRun:
    monkeypatch.setattr(services, "_enqueue", lambda e, r: None)
    return services.request_run(export, actor=SYSTEM)


def test_a_run_gives_the_job_its_spec_privately_and_records_its_answer(
    acme: Tenant, fake_job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = [{"name": "user_id", "path": "user.id", "type": "long"}]
    export = _export(acme, fields=fields, partition_by=["date"], include_lanes=True)
    run = _queued(export, monkeypatch)
    for partition, end in ((0, 10), (1, 3)):  # as the leaders last reported
        PartitionAssignment.objects.filter(topic=export.topic, partition=partition).update(
            log_end_offset=end
        )
    assert tasks.run_export(export.pk, run.pk) == "succeeded"
    seen = json.loads(fake_job.read_text())
    assert (seen["mode"], seen["dir_mode"]) == (0o600, 0o700)
    assert not Path(seen["path"]).exists()  # removed with its folder
    spec = ExportSpec.from_json(json.dumps(seen["spec"]))
    assert spec.topic == "acme.orders"
    assert spec.store_uri == export.topic.cluster.remote_store_uri
    assert spec.store_options == {"auto_mkdir": True}  # the cluster's, credentials included
    assert spec.target_uri == export.target_uri
    assert [f.name for f in spec.fields] == ["user_id"]
    assert (spec.partition_by, spec.include_lanes) == (("date",), True)
    run.refresh_from_db()
    assert (run.state, run.rows, run.bytes, run.files, run.dead_letter_rows) == (
        "succeeded", 10, 2048, 2, 1,
    )  # fmt: skip
    assert run.covered == {"acme.orders/0": 7, "acme.orders/1": 3}
    assert run.lag == {"acme.orders/0": 3, "acme.orders/1": 0}
    assert run.started_at is not None
    assert run.finished_at is not None
    assert services.progress(export)["covered"] == run.covered
    # The task is idempotent: a redelivery of a finished run does nothing.
    assert tasks.run_export(export.pk, run.pk) is None


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [("fail", "bad records"), ("crash", "Traceback: boom")],
)
def test_a_failed_job_is_a_failed_run_saying_why(
    acme: Tenant, fake_job: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str, error: str
) -> None:
    monkeypatch.setenv("FAKE_JOB", behaviour)
    export = _export(acme)
    run = _queued(export, monkeypatch)
    assert tasks.run_export(export.pk, run.pk) == "failed"
    run.refresh_from_db()
    assert error in run.error
    assert run.covered == {}


def test_a_job_past_its_timeout_is_killed_and_the_run_fails(
    acme: Tenant, fake_job: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    monkeypatch.setenv("FAKE_JOB", "sleep")
    settings.SPARK_JOB_TIMEOUT_S = 2.0
    export = _export(acme)
    run = _queued(export, monkeypatch)
    assert tasks.run_export(export.pk, run.pk) == "failed"
    run.refresh_from_db()
    assert "timeout" in run.error


def test_a_topic_that_stopped_tiering_fails_the_run_without_launching(
    acme: Tenant, fake_job: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = _export(acme)
    run = _queued(export, monkeypatch)
    type(export.topic).objects.filter(pk=export.topic.pk).update(remote_storage=False)
    assert tasks.run_export(export.pk, run.pk) == "failed"
    assert not fake_job.exists()
    run.refresh_from_db()
    assert "remote_storage" in run.error


def test_an_export_deleted_while_its_job_runs_ends_the_run_quietly(
    acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's row goes with the export: its outcome has nowhere to go."""
    export = _export(acme)
    run = _queued(export, monkeypatch)

    def deleted_meanwhile(module: str, spec_json: str, *, timeout_s: float) -> JobResult:
        services.delete_export(export, actor=SYSTEM)
        return JobResult(status="succeeded", rows=3, covered={"acme.orders/0": 3})

    monkeypatch.setattr(jobs, "run_job", deleted_meanwhile)
    assert tasks.run_export(export.pk, run.pk) is None
    assert not ExportRun.objects.exists()


def test_a_continuous_result_after_the_export_is_deleted_records_nothing(
    acme: Tenant,
) -> None:
    export = _export(acme, schedule_kind="continuous")
    services.delete_export(export, actor=SYSTEM)
    running._record_continuous(export, JobResult(status="failed", error="stopped"))
    assert not ExportRun.objects.filter(export_id=export.pk).exists()


def test_a_run_waits_for_the_export_lock(acme: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs of one export never overlap: a task finding the lock held is retried."""
    import threading

    export = _export(acme)
    run = _queued(export, monkeypatch)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        from django.db import connection

        with running.export_lock(export.pk):
            held.set()
            release.wait(30)
        connection.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert held.wait(30)
        monkeypatch.setattr("controlplane.topics.locks.DEFAULT_WAIT_S", 0.1)
        with pytest.raises(running.ExportBusy), running.export_lock(export.pk):
            pass
    finally:
        release.set()
        holder.join(30)
    assert ExportRun.objects.get(pk=run.pk).state == "queued"


def test_the_schedule_queues_due_exports_once(
    acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    manual = _export(acme)
    interval = services.create_export(
        acme, name="hourly", topic="orders", schedule_kind="interval", interval_minutes=60,
        actor=SYSTEM,
    )  # fmt: skip
    disabled = services.create_export(
        acme, name="off", topic="orders", schedule_kind="continuous", enabled=False,
        actor=SYSTEM,
    )  # fmt: skip
    now = datetime.now(UTC)
    first = _due(now)
    assert [ExportRun.objects.get(pk=r).export for r in first] == [interval]
    assert ExportRun.objects.get(pk=first[0]).trigger == "schedule"
    assert _due(now) == []  # one is queued already
    ExportRun.objects.filter(pk=first[0]).update(state="succeeded")
    assert _due(now + timedelta(minutes=59)) == []
    assert len(_due(now + timedelta(minutes=61))) == 1
    assert not manual.runs.exists()
    assert not disabled.runs.exists()


def test_runs_lost_with_their_worker_are_failed_by_the_schedule(
    acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = _export(acme)
    run = _queued(export, monkeypatch)
    later = datetime.now(UTC) + running.overdue_after() + timedelta(minutes=1)
    _due(later)
    run.refresh_from_db()
    assert run.state == "failed"
    assert "lost" in run.error


@pytest.mark.parametrize(
    ("cron", "since", "now", "due"),
    [
        ("*/15 * * * *", "10:01", "10:14", False),
        ("*/15 * * * *", "10:01", "10:15", True),
        ("0 3 * * *", "02:00", "03:00", True),
        ("0 3 * * 1", "02:00", "03:00", False),  # 2026-11-28 is a Saturday
        ("0 3 * * 6", "02:00", "03:00", True),
    ],
)
def test_cron_schedules(cron: str, since: str, now: str, due: bool) -> None:
    def at(hm: str) -> datetime:
        hour, minute = map(int, hm.split(":"))
        return datetime(2026, 11, 28, hour, minute, tzinfo=UTC)

    assert cron_due(cron, at(since), at(now)) is due


def test_the_beat_schedule_has_the_entry_with_expires() -> None:
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["exports.enqueue_due_exports"]
    assert entry["task"] == "exports.enqueue_due_exports"
    assert entry["options"]["expires"] > 0


def test_a_keeper_the_schedule_asks_expires_after_one_interval(acme: Tenant, settings: Any) -> None:
    """Published to the real broker: a keeper waiting in the queue past the next pass
    of the schedule (which asks its own) is dropped, so keepers never pile up."""
    from celery.signals import before_task_publish

    kept = _export(acme, schedule_kind="continuous")
    settings.EXPORTS_SCHEDULE_INTERVAL_S = 45.0
    published: list[tuple[str, Any, Any]] = []

    def seen(headers: dict[str, Any], body: Any, **kwargs: Any) -> None:
        published.append((headers["task"], headers["argsrepr"], headers["expires"]))

    before_task_publish.connect(seen)
    try:
        before = datetime.now(UTC)
        tasks.enqueue_due_exports()
        after = datetime.now(UTC)
    finally:
        before_task_publish.disconnect(seen)
    ((task, args, expires),) = published
    assert (task, args) == ("exports.keep_continuous_export", f"({kept.pk},)")
    interval = timedelta(seconds=45)
    assert before + interval <= datetime.fromisoformat(expires) <= after + interval


def test_the_real_command_runs_the_module_under_the_lifeline() -> None:
    command = jobs.job_command("spark.jobs.export", Path("/x/spec.json"))
    assert command[1:] == [
        "-m",
        "dataplane.lifeline",
        "spark.jobs.export",
        "--spec",
        "/x/spec.json",
    ]


SLEEPER = """
import os, sys, time
with open(sys.argv[1], "w") as out:
    out.write(str(os.getpid()))
time.sleep(600)
"""

WORKER = """
import sys
from pathlib import Path
from controlplane.exports.jobs import _started, _wait
command = [sys.executable, "-m", "dataplane.lifeline", "sleeper", sys.argv[1]]
with _started(command, Path(sys.argv[2])) as process:
    _wait(process, 600)
"""


def test_the_job_dies_with_the_worker_that_launched_it(tmp_path: Path) -> None:
    """The job runs under a lifeline only the launching process holds: SIGKILL the
    worker and the job gets SIGTERM (no orphan Spark job keeps running)."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    (tmp_path / "worker.py").write_text(WORKER)
    pid_file, workdir = tmp_path / "job.pid", tmp_path / "work"
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"}
    env.pop("MERIDIAN_LIFELINE_FD", None)
    worker = subprocess.Popen(
        [sys.executable, str(tmp_path / "worker.py"), str(pid_file), str(workdir)], env=env
    )
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text(), timeout_s=30)
        job_pid = int(pid_file.read_text())
        worker.kill()
        worker.wait(timeout=30)
        wait_until(lambda: not _alive(job_pid), timeout_s=30)
    finally:
        worker.kill()
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


CONTINUOUS_JOB = """
import json, os, sys, time
spec = json.load(open(sys.argv[sys.argv.index("--spec") + 1]))
assert "--continuous" in sys.argv and "--interval-s" in sys.argv
with open(os.environ["FAKE_JOB_SEEN"], "w") as seen:
    seen.write(str(os.getpid()))
for i in range(6000):
    covered = {spec["topic"] + "/0": i // 2}  # every other run adds nothing
    print(json.dumps({"status": "succeeded", "rows": i % 2, "covered": covered}), flush=True)
    time.sleep(0.05)
"""


def test_a_continuous_export_is_refused_a_manual_run(
    acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = _export(acme, schedule_kind="continuous")
    with pytest.raises(running.ExportIsContinuous):
        _queued(export, monkeypatch)


def test_the_schedule_asks_keepers_for_continuous_exports_without_a_job(acme: Tenant) -> None:
    kept = _export(acme, schedule_kind="continuous")
    services.create_export(
        acme, name="off", topic="orders", schedule_kind="continuous", enabled=False,
        actor=SYSTEM,
    )  # fmt: skip
    asked: list[int] = []
    queued = running.enqueue_due_exports(
        datetime.now(UTC), actor=SYSTEM, enqueue=lambda e, r: None, keep=asked.append
    )
    assert (queued, asked) == ([], [kept.pk])


@pytest.mark.django_db(transaction=True)
def test_a_continuous_export_keeps_one_job_until_it_is_disabled(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One keeper runs the job (a second returns at once), records the runs that moved
    the coverage, and stops the job once the export is disabled."""
    import threading

    from django.db import connection

    settings.EXPORT_ALLOWED_URIS = [f"{tmp_path}/exports/{{tenant}}/"]
    settings.DATA_DIR = str(tmp_path / "data")
    tiered_cluster(tmp_path / "store")
    acme = make_tenant("acme")
    tiered_topic(acme)
    export = _export(acme, schedule_kind="continuous")
    script = tmp_path / "continuous_job.py"
    script.write_text(CONTINUOUS_JOB)
    seen = tmp_path / "seen"
    monkeypatch.setenv("FAKE_JOB_SEEN", str(seen))
    monkeypatch.setattr(
        jobs, "job_command", lambda module, spec: [sys.executable, str(script), "--spec", str(spec)]
    )
    monkeypatch.setattr(running, "CONTINUOUS_POLL_S", 0.1)
    second: list[str] = []

    def meanwhile() -> None:
        try:
            wait_until(
                lambda: ExportRun.objects.filter(export=export, trigger="continuous").count() >= 3,
                timeout_s=60,
            )
            second.append(running.keep_continuous(export.pk))
            Export.objects.filter(pk=export.pk).update(enabled=False)
        finally:
            connection.close()

    other = threading.Thread(target=meanwhile, daemon=True)
    other.start()
    assert running.keep_continuous(export.pk).startswith("the job ended")
    other.join(30)
    assert second == ["kept by another task"]
    recorded = list(export.runs.order_by("pk"))
    assert {(r.trigger, r.state) for r in recorded} == {("continuous", "succeeded")}
    ends = [r.covered["acme.orders/0"] for r in recorded]
    assert ends == sorted(set(ends))  # one row per move of the coverage, never a repeat
    assert not _alive(int(seen.read_text()))
