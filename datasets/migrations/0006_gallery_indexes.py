# The gallery at a million images (issue 19): every page a range of an index, whatever the filter.
#
# - image (dataset, id): the unfiltered gallery; it replaces the foreign key's own index on
#   dataset, which every (dataset, ...) index already serves.
# - label (dataset_class, image): a class's images in id order, read from the keyset on; it
#   replaces the index on dataset_class alone, which the foreign key's own index duplicates.
#   Each table keeps as many indexes as before, so imports write no more.
# - On PostgreSQL, joint statistics on (dataset, split, status): the gallery shows the planner's
#   estimate past EXACT_COUNT_MAX images, and without them a dataset's share of the table would
#   be multiplied by the split's share across all datasets.

import django.db.models.deletion
from django.db import migrations, models

STATISTICS = "datasets_image_gallery_stats"


def statistics_create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE STATISTICS IF NOT EXISTS {STATISTICS} (mcv, dependencies) "
            "ON dataset_id, split, status FROM datasets_image"
        )


def statistics_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP STATISTICS IF EXISTS {STATISTICS}")


class Migration(migrations.Migration):
    dependencies = [
        ("datasets", "0005_import_lease_health_runs"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="image",
            index=models.Index(fields=["dataset", "id"], name="image_dataset_id_idx"),
        ),
        migrations.AlterField(
            model_name="image",
            name="dataset",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="images",
                to="datasets.dataset",
            ),
        ),
        migrations.AddIndex(
            model_name="label",
            index=models.Index(fields=["dataset_class", "image"], name="label_class_image_idx"),
        ),
        migrations.RemoveIndex(
            model_name="label",
            name="datasets_la_dataset_cdcb3d_idx",
        ),
        migrations.RunPython(statistics_create, statistics_drop, elidable=False),
    ]
