"""Transactions (Kafka's) and half messages (RocketMQ's) in the broker
(``docs/transactions.md``).

- ``state.py``: a transactional id's metadata and the rules of every change to it;
- ``codec.py`` and ``store.py``: the ``__transaction_state`` partitions it is kept in;
- ``coordinator.py``: the transaction coordinator (InitProducerId, AddPartitions,
  AddOffsets, EndTxn, verification, timeouts, operator aborts);
- ``halves.py``: half messages and their check-backs on the same coordinator;
- ``markers.py``: writing commit and abort markers to every partition of a transaction,
  and appending them as a partition's leader;
- ``verify.py``: a partition leader (or group coordinator) asking a transaction's
  coordinator before the first transactional write of a transaction;
- ``servicer.py``: the ``Transactions`` and ``TxnMarkers`` gRPC services;
- ``metrics.py``: their Prometheus metrics;
- ``wiring.py``: how the broker app puts them together.

The partition side (open transactions, the last stable offset, the aborted-transaction
index) is ``dataplane.broker.producers`` with ``dataplane.storage.txn_index``; reads by
isolation level are ``dataplane.broker.fetch``'s.
"""
