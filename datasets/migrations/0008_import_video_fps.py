# Issue 19: the frames per second sampled from each video of an upload, as its uploader picked.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("datasets", "0007_image_copies_per_dataset"),
    ]

    operations = [
        migrations.AddField(
            model_name="import",
            name="video_fps",
            field=models.FloatField(
                default=1.0, help_text="Frames per second sampled from each video in the upload."
            ),
        ),
    ]
