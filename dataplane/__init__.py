"""Meridian data plane: the broker, its storage engine and the Python SDK."""
