# Before one_active_export_per_model_format (0004): of the exports of one model to one format
# queued or running at once, the newest stays; the others are failed with a reason, so the
# constraint applies on a live database.

from django.db import migrations
from django.utils import timezone

ACTIVE = ("queued", "running")


def _duplicates_fail(apps, schema_editor):
    ModelExport = apps.get_model("deploy", "ModelExport")
    kept = set()
    for export in ModelExport.objects.filter(state__in=ACTIVE).order_by("-created_at", "-id"):
        if (export.model_id, export.format) in kept:
            export.state = "failed"
            export.error = "Stopped: another export of this model to this format was going at once."
            export.finished_at = timezone.now()
            export.save(update_fields=["state", "error", "finished_at"])
        kept.add((export.model_id, export.format))


class Migration(migrations.Migration):

    dependencies = [
        ('deploy', '0002_deployment_model_restrict'),
    ]

    operations = [
        migrations.RunPython(_duplicates_fail, migrations.RunPython.noop),
    ]
