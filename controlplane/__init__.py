"""The Meridian control plane. The Celery app is loaded with Django so that every
process (API server, worker, controller) publishes jobs through the configured broker."""

from controlplane.celery import app as celery_app

__all__ = ["celery_app"]
