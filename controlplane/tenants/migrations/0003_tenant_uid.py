"""Every tenant gets its immutable id; existing rows one each (a column default would give
them all the same)."""

import uuid

from django.db import migrations, models


def fill_uids(apps, schema_editor):  # type: ignore[no-untyped-def]
    Tenant = apps.get_model("tenants", "Tenant")
    for tenant in Tenant.objects.filter(uid__isnull=True):
        tenant.uid = uuid.uuid4()
        tenant.save(update_fields=["uid"])


class Migration(migrations.Migration):
    dependencies = [("tenants", "0002_slug_without_double_hyphen")]

    operations = [
        migrations.AddField(
            model_name="tenant", name="uid", field=models.UUIDField(null=True, editable=False)
        ),
        migrations.RunPython(fill_uids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="tenant",
            name="uid",
            field=models.UUIDField(default=uuid.uuid4, unique=True, editable=False),
        ),
    ]
