"""Tiered storage: sealed segments in an object store (DESIGN.md decision 3).

``store`` is the object store (fsspec), ``layout`` the keys and the remote manifest (the
format other programs read), ``manifests`` reads and commits manifests; the broker's
``TierManager`` (``dataplane.broker.tiering``) uploads, applies retention and serves
reads below the local log through ``remote_log``; ``reader`` reads a topic from the store
alone.
"""
