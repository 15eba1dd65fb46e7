"""Series belong to a tenant by its id, not its slug: a tenant taking the slug of a
deleted one must not read the deleted one's history.

Existing series go to the tenant now holding their slug when they are no older than it;
a series older than that tenant was the deleted namesake's, and a series whose slug no
tenant holds was a deleted tenant's: both are deleted with their blocks (next migration)."""

import django.db.models.deletion
from django.db import migrations, models


def assign_tenants(apps, schema_editor):  # type: ignore[no-untyped-def]
    """Series left without a tenant here are deleted by the next migration (deleting rows
    here would leave this one's deferred index creation facing pending trigger events
    on Postgres)."""
    Series = apps.get_model("metrics", "Series")
    Tenant = apps.get_model("tenants", "Tenant")
    tenants = {t.slug: t for t in Tenant.objects.all()}
    for series in Series.objects.all().iterator(2000):
        owner = tenants.get(series.tenant_slug)
        if owner is not None and series.created_at >= owner.created_at:
            Series.objects.filter(pk=series.pk).update(tenant_id=owner.pk)


class Migration(migrations.Migration):
    dependencies = [
        ("metrics", "0002_block_fillfactor"),
        ("tenants", "0003_tenant_uid"),
    ]

    operations = [
        migrations.AddField(
            model_name="series",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.tenant",
            ),
        ),
        migrations.RunPython(assign_tenants, migrations.RunPython.noop),
    ]
