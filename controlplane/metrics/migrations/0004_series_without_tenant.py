"""Series the previous migration found no tenant for — a deleted tenant's, or a deleted
namesake's older than the tenant now holding the slug — are deleted with their blocks
(in a migration of their own: on Postgres a table whose rows were deleted cannot be
altered in the same transaction)."""

from django.db import migrations


def delete_unowned(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("metrics", "Series").objects.filter(tenant=None).delete()


class Migration(migrations.Migration):
    dependencies = [("metrics", "0003_series_tenant")]

    operations = [migrations.RunPython(delete_unowned, migrations.RunPython.noop)]
