"""A group member in a process of its own, for tests that SIGKILL it.

    python -m tests.dataplane.broker.groups.member_process BOOTSTRAP GROUP TOPIC SESSION_MS

It joins ``GROUP`` for ``TOPIC``, commits offset 7 for every partition it is assigned,
then prints its assignment as one JSON line (``[[topic, partition], ...]``) each time
it changes to a non-empty one, and polls until killed.
"""

from __future__ import annotations

import json
import sys
import time

from dataplane.client.connection import ConnectionPool
from dataplane.client.group import GroupMember
from dataplane.client.metadata import ClusterMetadata

COMMITTED_OFFSET = 7


def main(bootstrap: str, group_id: str, topic: str, session_ms: str) -> None:
    metadata = ClusterMetadata(ConnectionPool(bootstrap))
    member = GroupMember(
        metadata,
        group_id=group_id,
        session_timeout_ms=int(session_ms),
        heartbeat_interval_ms=100,
        client_id="doomed",
    )
    member.subscribe([topic])
    shown = None
    while True:
        member.poll()
        assignment = member.assignment()
        if assignment and assignment != shown:
            member.commit(dict.fromkeys(assignment, COMMITTED_OFFSET))
            print(json.dumps(sorted(assignment)), flush=True)
            shown = assignment
        time.sleep(0.01)


if __name__ == "__main__":
    main(*sys.argv[1:5])
