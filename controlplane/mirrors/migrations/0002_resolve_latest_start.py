"""Links made with ``start_position`` ``latest`` before it was resolved at creation get
the time they were made as their start (``services._resolve_start``), so their workers
start at one point from now on."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def resolve_latest(apps: Any, schema_editor: Any) -> None:
    link_model = apps.get_model("mirrors", "MirrorLink")
    unresolved = link_model.objects.filter(start_position="latest", start_timestamp_ms__isnull=True)
    for link in unresolved.only("pk", "created_at"):
        start_ms = int(link.created_at.timestamp() * 1000)
        link_model.objects.filter(pk=link.pk).update(start_timestamp_ms=start_ms)


class Migration(migrations.Migration):
    dependencies = [("mirrors", "0001_initial")]

    operations = [migrations.RunPython(resolve_latest, migrations.RunPython.noop)]
