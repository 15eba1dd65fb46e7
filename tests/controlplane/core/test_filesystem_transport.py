"""The demo's Celery transport writes each message file whole before a worker can take
it (kombu's own creates the file first and writes it after, and a polling worker could
read it empty)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError

from controlplane.core import filesystem_transport


def connection(folder: Path) -> Connection:
    for name in ("q", "processed", "control"):
        (folder / name).mkdir()
    return Connection(
        "filesystem://",
        transport=filesystem_transport.Transport,
        transport_options={
            "data_folder_in": str(folder / "q"),
            "data_folder_out": str(folder / "q"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
        },
    )


def test_a_message_is_invisible_until_written_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_while_writing: list[Any] = []
    real_replace = os.replace

    def replace(source: str, target: str) -> None:
        channel = conn.default_channel
        try:
            seen_while_writing.append(channel._get("tasks"))
        except Exception as empty:
            seen_while_writing.append(type(empty).__name__)
        real_replace(source, target)

    with connection(tmp_path) as conn:
        monkeypatch.setattr(filesystem_transport.os, "replace", replace)
        conn.default_channel._put("tasks", {"task": "x", "body": "y" * 10_000})
        monkeypatch.undo()
        assert seen_while_writing == ["Empty"]
        assert conn.default_channel._get("tasks") == {"task": "x", "body": "y" * 10_000}
        assert os.listdir(tmp_path / "q") == []


def test_a_failed_write_is_a_channel_error(tmp_path: Path) -> None:
    with connection(tmp_path) as conn:
        (tmp_path / "q").rmdir()
        with pytest.raises(ChannelError):
            conn.default_channel._put("tasks", {"task": "x"})
