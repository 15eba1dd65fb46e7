"""Signing keys keep their private half sealed (``accounts.signing_keys``), never in
clear. Keys stored before were readable by whoever could read the database (the demo's
SQLite file was world-readable): they are retired, not sealed, since they may have been
copied; the local issuer makes a new key on first use and tokens the old ones signed
stop being accepted."""

from django.db import migrations, models


def retire_clear_keys(apps, schema_editor):
    apps.get_model("accounts", "SigningKey").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_name_without_double_hyphen"),
    ]

    operations = [
        migrations.RunPython(retire_clear_keys, migrations.RunPython.noop),
        migrations.RemoveField(model_name="signingkey", name="private_pem"),
        migrations.AddField(
            model_name="signingkey",
            name="sealed_private_key",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="signingkey",
            name="public_pem",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
    ]
