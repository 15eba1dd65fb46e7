"""No tables: transactional ids and half messages live in the brokers (their
transaction coordinators), and the control plane reads and changes them there, through
the gateway (``controlplane.gateway.transactions``). Changes are audited as
``transactions.transaction`` and ``transactions.half_message``."""
