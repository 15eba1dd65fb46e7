"""An application writing to a Databus agent until told to stop, for the crash tests.

    python -m tests.databus.writer --via http|grpc --target ADDR --token T --writer N \\
        --out FILE --stop FILE [--stream S] [--per-write K]

Each write carries ``--per-write`` records keyed ``w<N>`` with values ``{"w": N, "n":
seq}`` (seq counting up); the outcome of each record goes to ``--out`` as a line ``A
<seq>`` (acknowledged) or ``U <seq>`` (failed or unknown: the agent may have died with
it). A failed write is never sent again: what the test counts is what the agent
acknowledged.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from databus import Client, DatabusError


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--via", choices=["http", "grpc"], required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--writer", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stop", required=True)
    p.add_argument("--stream", default="clicks")
    p.add_argument("--per-write", type=int, default=5)
    args = p.parse_args()
    stop = Path(args.stop)
    client = Client(args.target, token=args.token, timeout_s=10) if args.via == "grpc" else None
    seq = 0
    with open(args.out, "a", buffering=1) as out:
        while not stop.exists():
            numbers = list(range(seq, seq + args.per_write))
            seq += args.per_write
            values = [json.dumps({"w": args.writer, "n": n}) for n in numbers]
            try:
                if client is not None:
                    client.write_many(args.stream, [(f"w{args.writer}", v) for v in values])
                else:
                    _post(args, values)
                mark = "A"
            except (DatabusError, OSError, urllib.error.URLError):
                mark = "U"
                time.sleep(0.05)
            out.write("".join(f"{mark} {n}\n" for n in numbers))


def _post(args: argparse.Namespace, values: list[str]) -> None:
    body = json.dumps({"records": [{"key": f"w{args.writer}", "value": v} for v in values]})
    request = urllib.request.Request(
        f"http://{args.target}/v1/streams/{args.stream}/records",
        data=body.encode(),
        headers={"Authorization": f"Bearer {args.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 200:
            raise OSError(f"answered {answer.status}")


if __name__ == "__main__":
    main()
