"""SQLite keeps deleted rows' bytes in free pages and in its write-ahead log: rebuild the
file and empty the log, so the keys retired by 0003 are gone from the disk too. Outside
a transaction (``VACUUM`` cannot run in one). Postgres needs nothing here: the local
issuer with Postgres is for tests, and its old row versions are reclaimed by its own
vacuum."""

from django.db import migrations


def scrub_sqlite(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "sqlite" or connection.settings_dict["NAME"] == ":memory:":
        return
    with connection.cursor() as cursor:
        cursor.execute("VACUUM")
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("accounts", "0003_signing_key_sealed"),
    ]

    operations = [
        migrations.RunPython(scrub_sqlite, migrations.RunPython.noop, atomic=False),
    ]
