"""The control plane's one way to a broker.

Every control-plane call to a broker goes through this package: ``channels`` opens and
pools the channels (TLS, the controller's token, fast reconnects), ``errors`` sorts a
failure into unavailable (retry later) or refused (retrying cannot help), and ``admin``
holds the typed Admin calls with their deadlines. Later parts that drive brokers from
the control plane (mirror and lane lifecycles) add their calls to ``admin``.
"""
