"""The series' tenant is required, and names are unique within a tenant."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("metrics", "0004_series_without_tenant")]

    operations = [
        migrations.AlterField(
            model_name="series",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="tenants.tenant",
            ),
        ),
        migrations.RemoveConstraint(model_name="series", name="series_unique"),
        migrations.RemoveField(model_name="series", name="tenant_slug"),
        migrations.AddConstraint(
            model_name="series",
            constraint=models.UniqueConstraint(
                fields=("tenant", "kind", "topic", "group"), name="series_unique_in_tenant"
            ),
        ),
    ]
