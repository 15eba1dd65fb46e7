"""Every service account gets its immutable id; existing rows one each (a column default
would give them all the same)."""

import uuid

from django.db import migrations, models


def fill_uids(apps, schema_editor):  # type: ignore[no-untyped-def]
    ServiceAccount = apps.get_model("accounts", "ServiceAccount")
    for account in ServiceAccount.objects.filter(uid__isnull=True):
        account.uid = uuid.uuid4()
        account.save(update_fields=["uid"])


class Migration(migrations.Migration):
    dependencies = [("accounts", "0004_scrub_retired_keys")]

    operations = [
        migrations.AddField(
            model_name="serviceaccount",
            name="uid",
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.RunPython(fill_uids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="serviceaccount",
            name="uid",
            field=models.UUIDField(default=uuid.uuid4, unique=True, editable=False),
        ),
    ]
