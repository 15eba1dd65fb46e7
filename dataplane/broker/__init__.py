"""The Meridian broker: partition logs served over gRPC.

``main`` is the process (``meridian-broker``), ``app.BrokerApp`` one broker in an event
loop, ``config`` its settings. Requests pass through ``services`` (thin servicers) to
``produce``, ``fetch``, ``admin`` and ``cluster`` (metadata); ``partitions`` holds the
hosted logs with their producer state (``producers``, ids from ``producer_ids``);
``groups`` is the consumer-group coordinator; ``errors`` maps failures to wire errors.
"""
