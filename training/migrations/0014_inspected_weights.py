# Issue 31: a checkpoint among a job's artifacts is served only once it passed inspection.
# Checkpoints stored before are not recorded here, so they are no longer served or linked.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('training', '0013_progress_watch'),
    ]

    operations = [
        migrations.AddField(
            model_name='trainingjob',
            name='inspected_weights',
            field=models.JSONField(blank=True, default=dict, help_text='Checkpoints among the artifacts that passed inspection: name → storage key.'),
        ),
    ]
