# Dedicated endpoints placed by SkyServe: where they run, their replicas, log tail and metering.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("deploy", "0005_collection_rules"),
        ("training", "0015_pixel_tasks"),
    ]

    operations = [
        migrations.AddField(
            model_name="deployment",
            name="charged",
            field=models.PositiveBigIntegerField(
                default=0, help_text="Micro-credits of its replica time captured so far."
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="gpu_type",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="training.gputype",
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="last_ready_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="deployment",
            name="log",
            field=models.TextField(blank=True, help_text="The tail of its log."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="metered_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="deployment",
            name="placement",
            field=models.CharField(
                choices=[("local", "This machine"), ("skyserve", "A GPU rented through SkyPilot")],
                default="local",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="replaced",
            field=models.PositiveIntegerField(default=0, help_text="Replicas SkyServe replaced."),
        ),
        migrations.AddField(
            model_name="deployment",
            name="replica_seconds",
            field=models.FloatField(default=0),
        ),
        migrations.AddField(
            model_name="deployment",
            name="replicas",
            field=models.JSONField(
                blank=True, default=list, help_text="SkyServe's replicas: id, status, endpoint."
            ),
        ),
        migrations.AddField(
            model_name="deployment",
            name="service_name",
            field=models.CharField(blank=True, help_text="SkyServe's name.", max_length=63),
        ),
        migrations.AddField(
            model_name="deployment",
            name="url",
            field=models.CharField(
                blank=True,
                help_text="Where web processes send its calls, once ready.",
                max_length=300,
            ),
        ),
    ]
