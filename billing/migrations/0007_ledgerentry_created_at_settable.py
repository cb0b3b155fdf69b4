"""LedgerEntry.created_at: a Python default (now) instead of auto_now_add, so a signup grant can
be dated when its workspace was created.

Only Django's state changes: the column is the same on every database (NOT NULL, no database
default either way). Altering it for real would make SQLite rebuild the table, which drops the
append-only triggers of 0004.
"""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("billing", "0006_plan_max_model_upload_bytes_and_more")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="ledgerentry",
                    name="created_at",
                    field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
                )
            ],
            database_operations=[],
        )
    ]
