"""Existing codes and refresh tokens each get a family of their own: the column's default
was computed once for all of them (in a migration of its own, after the previous one's
index is built)."""

import uuid

from django.db import migrations


def one_family_each(apps, schema_editor):  # type: ignore[no-untyped-def]
    """The column's default was computed once for every existing row: give each row a
    family of its own (each was its own sign-in, as far as anyone can tell now)."""
    for name in ("AuthorizationCode", "RefreshToken"):
        model = apps.get_model("accounts", name)
        for pk in model.objects.values_list("pk", flat=True):
            model.objects.filter(pk=pk).update(family=uuid.uuid4().hex)


class Migration(migrations.Migration):
    dependencies = [("accounts", "0008_sign_in_replays_and_throttle")]

    operations = [migrations.RunPython(one_family_each, migrations.RunPython.noop)]
