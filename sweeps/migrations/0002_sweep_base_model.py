import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sweeps", "0001_sweeps"),
        ("training", "0015_pixel_tasks"),
    ]

    operations = [
        migrations.AddField(
            model_name="sweep",
            name="base_model",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="training.trainedmodel",
            ),
        ),
    ]
