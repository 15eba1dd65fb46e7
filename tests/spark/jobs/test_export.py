"""The Parquet export job: exactly once, dead letters counted, folders by hour, raw
values, lanes, an S3 target, overlapping runs, a run killed half-way."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dataplane.tiered.store import ObjectStore
from spark import manifests
from spark.jobs import export
from spark.jobs.spec import ExportSpec, Field, JobResult
from spark.manifests import DefinitionChangedError, OverlappingRunError
from tests.spark.jobs.support import Source, latest, read_files, rows_of, run_job

pytestmark = pytest.mark.slow

FIELDS = (
    Field("user_id", "user.id", "long"),
    Field("country", "country", "string"),
    Field("amount", "amount", "double"),
)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def exported(
    source: Source, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[ExportSpec, JobResult]:
    """The export of ``FIELDS`` by date and hour, run once."""
    folder = tmp_path_factory.mktemp("exported")
    spec = _spec(source, folder / "out")
    code, result = run_job(export, spec, folder, spark)
    assert code == 0, result.error
    return spec, result


def _spec(source: Source, target: Any, **changes: Any) -> ExportSpec:
    values: dict[str, Any] = {
        "export_id": "e1",
        "topic": "acme.orders",
        "store_uri": source.uri,
        "target_uri": str(target),
        "fields": FIELDS,
        "partition_by": ("date", "hour"),
        **changes,
    }
    return ExportSpec(**values)


def _listing(uri: str) -> dict[str, list[dict[str, Any]]]:
    return {path: table.to_pylist() for path, table in read_files(uri, "data")}


def test_every_record_that_fits_is_one_row_and_a_rerun_adds_nothing(
    source: Source, exported: tuple[ExportSpec, JobResult], spark: Any, tmp_path: Path
) -> None:
    spec, result = exported
    rows = rows_of(spec.target_uri)
    assert {(r["topic"], r["partition"], r["offset"]) for r in rows} == source.good()
    assert len(rows) == result.rows == len(source.good())
    ends = {f"acme.orders/{p.partition}": p.store_end for p in source.parts["acme.orders"]}
    assert result.covered == ends
    assert list(rows[0]) == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "lane",
        "headers",
        "user_id",
        "country",
        "amount",
    ]
    before = _listing(spec.target_uri)
    code, again = run_job(export, spec, tmp_path, spark)
    assert (code, again.manifest_version, again.rows, again.files) == (0, 1, 0, 0)
    assert _listing(spec.target_uri) == before


def test_files_sit_in_the_folder_of_their_records_hour(
    exported: tuple[ExportSpec, JobResult],
) -> None:
    spec, _ = exported
    folders = set()
    for path, table in read_files(spec.target_uri, "data"):
        folder = path.rsplit("/", 1)[0]
        folders.add(folder)
        for moment in table.column("timestamp").to_pylist():
            assert folder == f"date={moment:%Y-%m-%d}/hour={moment:%H}"
    assert len(folders) >= 2


def test_records_that_do_not_fit_are_dead_letters_counted_with_their_reason(
    exported: tuple[ExportSpec, JobResult],
) -> None:
    spec, result = exported
    dead = rows_of(spec.target_uri, "dead_letter")
    assert result.dead_letter_rows == len(dead) == 4 + 40
    assert latest(spec.target_uri).counts["dead_letter_rows"] == len(dead)
    reasons = [r["reason"] for r in dead]
    assert reasons[0].startswith("not JSON")
    assert reasons[1:4] == [
        "not a JSON object",
        "tombstone: the record has no value",
        "amount: expected double, got string",
    ]
    assert set(reasons[4:]) == {"amount: expected double, got string"}
    assert dead[0]["value"] == b"not json"
    assert dead[2]["key"] == b"gone"
    lacking = [r for r in rows_of(spec.target_uri) if r["user_id"] is None]
    assert len(lacking) == 1  # a missing field is a null, not a dead letter
    assert lacking[0]["country"] == "fr"


def test_a_raw_export_keeps_every_record_and_its_bytes(
    source: Source, spark: Any, tmp_path: Path
) -> None:
    spec = _spec(source, tmp_path / "out", value_format="raw", fields=(), partition_by=())
    assert run_job(export, spec, tmp_path, spark)[0] == 0
    rows = rows_of(spec.target_uri)
    expected = [r for p in source.parts["acme.orders"] for r in p.records(0, p.store_end)]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (r.offset, r.key, r.value) for r in expected
    ]
    headers = {(r["partition"], r["offset"]): r["headers"] for r in rows if r["headers"]}
    assert headers[0, 0] == [{"key": "trace", "value": b"t0"}]
    assert all("/" not in path for path, _ in read_files(spec.target_uri, "data"))


def test_lanes_are_exported_only_when_asked_with_their_lane(
    source: Source, spark: Any, tmp_path: Path
) -> None:
    spec = _spec(source, tmp_path / "out", include_lanes=True)
    code, result = run_job(export, spec, tmp_path, spark)
    assert code == 0
    lane_rows = [r for r in rows_of(spec.target_uri) if r["topic"] == "acme.orders~eu"]
    assert len(lane_rows) == len(source.good("acme.orders~eu")) == 300
    assert {r["lane"] for r in lane_rows} == {"eu"}
    assert "acme.orders~eu/0" in result.covered


def test_fields_are_inferred_on_the_first_run_and_kept(
    source: Source, spark: Any, tmp_path: Path
) -> None:
    spec = _spec(source, tmp_path / "out", fields=())
    assert run_job(export, spec, tmp_path, spark)[0] == 0
    manifest = latest(spec.target_uri)
    assert manifest.inferred
    assert [(f.name, f.type) for f in manifest.fields] == [
        ("amount", "double"),
        ("country", "string"),
        ("coupon", "string"),
        ("note", "string"),
        ("paid", "boolean"),
        ("user_id", "long"),
    ]


def test_an_s3_target(
    source: Source,
    spark: Any,
    tmp_path: Path,
    s3_store_uri: tuple[str, dict[str, Any]],
) -> None:
    uri, options = s3_store_uri
    spec = _spec(source, f"{uri}/exports/e1", target_options=options, partition_by=())
    code, result = run_job(export, spec, tmp_path, spark)
    assert code == 0, result.error
    rows = rows_of(spec.target_uri, options=options)
    assert {(r["topic"], r["partition"], r["offset"]) for r in rows} == source.good()
    assert run_job(export, spec, tmp_path, spark)[1].files == 0


def test_an_overlapping_run_loses_the_commit_and_lists_nothing_twice(
    source: Source,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spec(source, tmp_path / "out")
    real_commit = manifests.commit

    def racing_commit(store: ObjectStore, manifest: Any) -> None:
        # The other run gets there first, with the same files.
        monkeypatch.setattr(manifests, "commit", real_commit)
        real_commit(store, manifest)
        real_commit(store, manifest)

    monkeypatch.setattr(manifests, "commit", racing_commit)
    code, result = run_job(export, spec, tmp_path, spark)
    assert code == 1
    assert result.status == "failed"
    assert result.error.startswith(OverlappingRunError.__name__)
    manifest = latest(spec.target_uri)
    assert manifest.version == 1
    paths = [f.path for f in manifest.files]
    assert len(paths) == len(set(paths))


def test_an_export_re_created_on_the_target_of_a_deleted_one_fails_not_skips(
    exported: tuple[ExportSpec, JobResult], spark: Any, tmp_path: Path
) -> None:
    """A new export (another id) does not inherit the old one's coverage."""
    spec, _ = exported
    before = _listing(spec.target_uri)
    again = dataclasses.replace(spec, export_id="e2")
    code, result = run_job(export, again, tmp_path, spark)
    assert (code, result.status) == (1, "failed")
    assert result.error.startswith(DefinitionChangedError.__name__)
    assert "holds the files of another export" in result.error
    assert _listing(spec.target_uri) == before


def test_a_bad_spec_fails_with_its_reason(source: Source, spark: Any, tmp_path: Path) -> None:
    spec = _spec(source, tmp_path / "out", fields=(Field("offset", "x", "long"),))
    code, result = run_job(export, spec, tmp_path, spark)
    assert (code, result.status) == (1, "failed")
    assert "taken by a column" in result.error


def test_a_run_killed_half_way_then_run_again_gives_the_same_output(
    source: Source, spark: Any, tmp_path: Path
) -> None:
    killed = _spec(source, tmp_path / "killed")
    whole = _spec(source, tmp_path / "whole")
    path = tmp_path / "killed.json"
    path.write_text(killed.to_json())
    process = subprocess.Popen(
        [sys.executable, "-m", "spark.jobs.export", "--spec", str(path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not any((tmp_path / "killed").rglob("*.parquet")):
            assert process.poll() is None, "the job ended before writing a file"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    assert not (tmp_path / "killed" / "_manifest").exists()
    assert run_job(export, killed, tmp_path, spark)[0] == 0
    assert run_job(export, whole, tmp_path, spark)[0] == 0
    assert _listing(killed.target_uri) == _listing(whole.target_uri)
    assert rows_of(killed.target_uri, "dead_letter") == rows_of(whole.target_uri, "dead_letter")


def test_an_inferred_export_with_nothing_to_infer_from_fails_and_commits_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """Sealed records none of which is a JSON object: the run fails saying so and
    commits nothing, rather than fix a schema of no columns for every later record."""
    from tests.spark.jobs.topics import Row, TieredTopic

    store = ObjectStore.open(str(tmp_path / "store"))
    part = TieredTopic(store, tmp_path / "logs", "acme.junk", 0)
    part.produce([Row(b"not json"), Row(None, key=b"gone"), Row(b"[1, 2]")])
    part.seal()
    target = tmp_path / "out"
    spec = ExportSpec(export_id="e9", topic="acme.junk", store_uri=store.uri,
                      target_uri=str(target))  # fmt: skip
    code, result = run_job(export, spec, tmp_path, spark)
    assert code == 1, result
    assert "declare the export's fields" in result.error
    assert manifests.read_latest(ObjectStore.open(str(target))) is None
