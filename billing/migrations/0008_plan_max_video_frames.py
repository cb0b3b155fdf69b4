# Issue 19: the most frames an import takes from one video, per plan. Plans take the default
# (3,000, the Free plan's); the standard Pro and Enterprise plans, where already seeded, get their
# own figures (as billing/plans.py seeds them). The field is new, so no admin's edit is replaced.

from django.db import migrations, models

SEEDED = {"pro": 20_000, "enterprise": 100_000}


def seeded_set(apps, schema_editor):
    Plan = apps.get_model("billing", "Plan")
    for slug, frames in SEEDED.items():
        Plan.objects.filter(slug=slug).update(max_video_frames=frames)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_ledgerentry_created_at_settable"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="max_video_frames",
            field=models.PositiveIntegerField(
                default=3000, help_text="Most frames an import takes from one video."
            ),
        ),
        migrations.RunPython(seeded_set, migrations.RunPython.noop, elidable=True),
    ]
