"""The business-messaging benchmark: delayed delivery and retries
(``bench/messaging_delay.py``), then transactions and half messages
(``bench/messaging_txn.py``), one after the other in one run. Each part's docstring says
what it measures and how; ``bench/README.md`` has the figures.

``.venv/bin/python bench/messaging.py [--quick] [--part delay|txn]`` (or ``./dev bench
messaging ...``); further flags go to both parts (``--quick`` is the one they share).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import messaging_delay
import messaging_txn

PARTS = {"delay": messaging_delay.main, "txn": messaging_txn.main}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=sorted(PARTS), help="run one part alone")
    args, rest = parser.parse_known_args(argv)
    status = 0
    for name, run in PARTS.items():
        if args.part in (None, name):
            print(f"\n===== {name} =====", flush=True)
            status = run(rest) or status
    return status


if __name__ == "__main__":
    sys.exit(main())
