"""Tiered storage: sealed segments in an object store (DESIGN.md decision 3).

``store`` is the object store (fsspec), ``layout`` the keys and the remote manifest (the
format other programs read), ``manifests`` reads and commits manifests, ``upload`` puts a
sealed segment in the store, ``deletion`` removes a topic's objects. The broker's
``TierManager`` (``dataplane.broker.tiering``) uploads, applies retention and serves
reads below the local log through ``remote_log`` (its chunks in ``cache``); ``reader``
reads a topic from the store alone. Both readers check what they read through
``segment_objects`` and raise the typed errors of ``errors``.
"""
