"""Offsets committed in a transaction against its end marker, on the group coordinator in
process (a real ``LogManager``; the transaction coordinator's verification is a
function here): a marker crossing the verification leaves nothing pending, a
transaction's first commit is verified again after each marker, another transactional
id never joins a producer's pending offsets unverified, and an older epoch's marker
leaves a newer transaction's offsets pending."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from dataplane.broker.groups import GroupCoordinator
from dataplane.broker.groups.coordinator import OffsetCommit
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.manager import LogManager

GROUP, PID, TID = "acme.app", 9, "acme.loader"
TP = ("acme.in", 0)


@asynccontextmanager
async def coordinator(directory: Path) -> AsyncIterator[GroupCoordinator]:
    manager = LogManager(directory)
    manager.open()
    core = GroupCoordinator(broker_id=1, manager=manager, num_partitions=1)
    await core.start([0])
    try:
        yield core
    finally:
        await core.stop()
        manager.close()


async def committed(core: GroupCoordinator) -> int | None:
    found = (await core.fetch_offsets(GROUP, [TP])).get(TP)
    return getattr(found, "offset", None)


async def commit(core: GroupCoordinator, offset: int, *, tid: str = TID, epoch: int = 0) -> None:
    results = await core.txn_offset_commit(
        tid, PID, epoch, GROUP, -1, "", [OffsetCommit(*TP, offset)]
    )
    assert results == {TP: None}


def test_a_marker_crossing_the_verification_leaves_no_offsets_pending(tmp_path: Path) -> None:
    """T1's commit is being verified when the client aborts T1 and its marker reaches
    the group: T1's offsets are refused, so T2 (same epoch) cannot commit them."""

    async def scenario() -> None:
        async with coordinator(tmp_path) as core:
            asked: list[str] = []

            async def verify(tid: str, pid: int, epoch: int, partition: int) -> None:
                asked.append(tid)
                if len(asked) == 1:
                    await core.complete_txn(0, PID, 0, False)  # T1 aborted meanwhile
                return None

            core.verify = verify
            with pytest.raises(MeridianError) as refused:
                await commit(core, 100)
            assert refused.value.code == ErrorCode.INVALID_TXN_STATE
            await commit(core, 50)  # T2, verified again
            await core.complete_txn(0, PID, 0, True)
            assert await committed(core) == 50
            await commit(core, 60)  # T3's first commit: verified again
            await commit(core, 70)  # joins T3: no question
            await commit(core, 80, tid="acme.other")  # another id: asked
            assert asked == [TID, TID, TID, "acme.other"]

    asyncio.run(scenario())


def test_an_older_epochs_marker_leaves_a_newer_transactions_offsets_pending(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with coordinator(tmp_path) as core:

            async def verify(tid: str, pid: int, epoch: int, partition: int) -> None:
                return None

            core.verify = verify
            await commit(core, 10, epoch=3)
            await core.complete_txn(0, PID, 2, True)  # a late marker of epoch 2
            unstable = (await core.fetch_offsets(GROUP, [TP], require_stable=True))[TP]
            assert isinstance(unstable, MeridianError)
            assert unstable.code == ErrorCode.UNSTABLE_OFFSET_COMMIT
            await core.complete_txn(0, PID, 3, True)
            assert await committed(core) == 10

    asyncio.run(scenario())
