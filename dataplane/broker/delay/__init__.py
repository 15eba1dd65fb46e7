"""Delayed delivery on the broker: the timer logs, their movers and the Delay service
(docs/delay.md).

- ``index``: the due-time index of one timer partition and its per-offset state;
- ``markers``: what a mover writes into its timer partition (moves, cancellations);
- ``schedule``: taking records due later, from the timer log's produce path and from a
  topic's (``x-deliver-at``);
- ``targets``: writing moved records to their topics, on this broker or another;
- ``mover``: one timer partition's leader work: rebuild, resolve, move, cancel, list;
- ``manager``: which movers run here, the Delay service, the metrics and the heartbeat.
"""
