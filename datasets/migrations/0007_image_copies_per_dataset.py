# Issue 19: byte-identical images in one dataset are rows of their own (each with its labels and
# split) sharing one blob, so (dataset, blob) is no longer unique.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("datasets", "0006_gallery_indexes"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="image", name="image_once_per_dataset"),
    ]
