from django.db import migrations, models


class Migration(migrations.Migration):
    """A tenant's internal topics (its timer logs) have one name in every cluster."""

    dependencies = [
        ("topics", "0010_mirror_copies"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="topic", name="topic_unique_origin_full_name"),
        migrations.RemoveConstraint(model_name="topic", name="topic_unique_name"),
        migrations.AddConstraint(
            model_name="topic",
            constraint=models.UniqueConstraint(
                condition=models.Q(("mirror_of__isnull", True), models.Q(("name__startswith", "__"), _negated=True)),
                fields=("full_name",),
                name="topic_unique_origin_full_name",
            ),
        ),
        migrations.AddConstraint(
            model_name="topic",
            constraint=models.UniqueConstraint(
                condition=models.Q(("mirror_of__isnull", True), models.Q(("name__startswith", "__"), _negated=True)),
                fields=("tenant", "name"),
                name="topic_unique_name",
            ),
        ),
        migrations.AddConstraint(
            model_name="topic",
            constraint=models.UniqueConstraint(
                condition=models.Q(("name__startswith", "__")),
                fields=("full_name", "cluster"),
                name="topic_unique_internal_per_cluster",
            ),
        ),
    ]
