"""An export's date/hour folders (no Spark): UTC, floor of negative times, and a
timestamp no date holds in Hive's default partition, never a failed run."""

from __future__ import annotations

import pyarrow as pa

from spark.export import DEFAULT_PARTITION, time_folders

HOUR_US = 3_600_000_000


def _table(micros: list[int | None]) -> pa.Table:
    return pa.table(
        {
            "offset": pa.array(range(len(micros)), pa.int64()),
            "timestamp": pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        }
    )


def test_rows_go_to_the_folder_of_their_hour_in_utc() -> None:
    folders = time_folders(_table([0, HOUR_US - 1, HOUR_US, -1]), ("date", "hour"))
    assert [(f, t.column("offset").to_pylist()) for f, t in folders] == [
        ("date=1969-12-31/hour=23/", [3]),
        ("date=1970-01-01/hour=00/", [0, 1]),
        ("date=1970-01-01/hour=01/", [2]),
    ]


def test_timestamps_no_date_holds_go_to_the_default_partition() -> None:
    far = 2**62  # microseconds: past the year 9999, and past what a float holds exactly
    folders = time_folders(_table([far, 0, None, -far]), ("date",))
    assert [(f, t.column("offset").to_pylist()) for f, t in folders] == [
        ("date=1970-01-01/", [1]),
        (f"date={DEFAULT_PARTITION}/", [0, 2, 3]),
    ]
