from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("quotas", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="quota",
            name="max_exports",
            field=models.PositiveIntegerField(default=10),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="quota",
            name="max_indexes",
            field=models.PositiveIntegerField(default=10),
            preserve_default=False,
        ),
    ]
