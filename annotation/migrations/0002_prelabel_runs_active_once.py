# Before one_active_prelabel_run_per_dataset (0003): of the runs a dataset has queued or
# running at once, the newest stays; the others are failed with a reason, so the constraint
# applies on a live database.

from django.db import migrations
from django.utils import timezone

ACTIVE = ("queued", "running")


def _duplicates_fail(apps, schema_editor):
    PrelabelRun = apps.get_model("annotation", "PrelabelRun")
    kept = set()
    for run in PrelabelRun.objects.filter(state__in=ACTIVE).order_by("-created_at", "-id"):
        if run.dataset_id in kept:
            run.state = "failed"
            run.error = "Stopped: another pre-labelling run of this dataset was going at once."
            run.finished_at = timezone.now()
            run.save(update_fields=["state", "error", "finished_at"])
        kept.add(run.dataset_id)


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0001_initial'),
    ]

    operations = [
        migrations.RunPython(_duplicates_fail, migrations.RunPython.noop),
    ]
