"""The manifest log of a job's target: versions, the exclusive commit, the definition."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.tiered.store import ObjectStore
from spark import manifests
from spark.manifests import (
    DamagedManifestError,
    DefinitionChangedError,
    OutputFile,
    OutputManifest,
    OverlappingRunError,
)

DEFINITION = {"topic": "acme.orders", "value_format": "json", "fields": []}


def _file(start: int, end: int) -> OutputFile:
    return OutputFile(
        f"acme.orders-0-{start}-{end}.parquet", "acme.orders", 0, start, end, 5, 100, "data"
    )


def test_versions_accumulate_files_covered_ends_and_counts(tmp_path: Path) -> None:
    store = ObjectStore.open(str(tmp_path))
    empty = manifests.latest(store, "export", DEFINITION)
    assert empty.version == 0
    first = empty.next_version([_file(0, 10)], {"acme.orders/0": 10}, {}, {"rows": 5}, now_ms=1)
    manifests.commit(store, first)
    second = manifests.latest(store, "export", DEFINITION).next_version(
        [_file(10, 20)], {"acme.orders/0": 20}, {"acme.orders/0": 3}, {"rows": 5}, now_ms=2
    )
    manifests.commit(store, second)
    latest = manifests.latest(store, "export", DEFINITION)
    assert latest == second
    assert latest.version == 2
    assert [f.start for f in latest.files] == [0, 10]
    assert latest.covered == {"acme.orders/0": 20}
    assert latest.counts == {"rows": 10}
    assert latest.skipped == {"acme.orders/0": 3}
    assert manifests.versions(store) == [1, 2]


def test_a_run_that_loses_the_commit_race_gets_a_typed_error_and_lists_nothing(
    tmp_path: Path,
) -> None:
    store = ObjectStore.open(str(tmp_path))
    base = manifests.latest(store, "export", DEFINITION)
    winner = base.next_version([_file(0, 10)], {"acme.orders/0": 10}, {}, {}, now_ms=1)
    loser = base.next_version([_file(0, 10)], {"acme.orders/0": 10}, {}, {}, now_ms=2)
    manifests.commit(store, winner)
    with pytest.raises(OverlappingRunError) as caught:
        manifests.commit(store, loser)
    assert (caught.value.version, caught.value.latest) == (1, 1)
    assert manifests.latest(store, "export", DEFINITION) == winner


def test_a_target_of_another_definition_is_refused(tmp_path: Path) -> None:
    store = ObjectStore.open(str(tmp_path))
    manifests.commit(
        store, OutputManifest("export", DEFINITION).next_version([], {}, {}, {}, now_ms=1)
    )
    with pytest.raises(DefinitionChangedError) as caught:
        manifests.latest(store, "export", {**DEFINITION, "value_format": "raw"})
    assert caught.value.changed == ["value_format"]
    with pytest.raises(DefinitionChangedError):
        manifests.latest(store, "index", DEFINITION)


def test_a_damaged_manifest_is_a_typed_error(tmp_path: Path) -> None:
    store = ObjectStore.open(str(tmp_path))
    store.put_bytes(manifests.manifest_key(1), b"{not json")
    with pytest.raises(DamagedManifestError):
        manifests.latest(store, "export", DEFINITION)


def test_manifests_round_trip_through_json() -> None:
    manifest = OutputManifest("index", DEFINITION).next_version(
        [OutputFile("f/x.parquet", "acme.orders", 1, 0, 9, 3, 77, "index", "f")],
        {"acme.orders/1": 9},
        {},
        {"indexed.f": 3},
        now_ms=5,
    )
    assert OutputManifest.from_bytes(manifest.to_bytes()) == manifest
