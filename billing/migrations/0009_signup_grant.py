# Issue 33: sign-up credits once per person, not per workspace. A person whose personal
# workspace already opened with them (every account before this) is recorded as having had
# them, so confirming another address later grants nothing more.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def grants_record(apps, schema_editor):
    LedgerEntry = apps.get_model("billing", "LedgerEntry")
    SignupGrant = apps.get_model("billing", "SignupGrant")
    entries = LedgerEntry.objects.filter(
        kind="grant",
        reason__startswith="Signup credits",
        account__workspace__is_personal=True,
        account__workspace__created_by__isnull=False,
    ).select_related("account__workspace__created_by")
    taken = set()
    for entry in entries.order_by("pk"):
        user = entry.account.workspace.created_by
        email = user.email.strip().lower()
        if user.pk in taken or email in taken:
            continue
        taken |= {user.pk, email}
        SignupGrant.objects.create(user=user, email=email, entry=entry)


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0008_plan_max_video_frames"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SignupGrant",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "email",
                    models.EmailField(
                        help_text="The confirmed address, in lower case.",
                        max_length=254,
                        unique=True,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "entry",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="billing.ledgerentry",
                    ),
                ),
                (
                    "user",
                    models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="signup_grant",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.AlterField(
            model_name="plan",
            name="signup_credits",
            field=models.PositiveBigIntegerField(
                default=0,
                help_text="Micro-credits granted once per person, into their personal workspace, "
                "when they confirm their address (billing.ledger.signup_credits_grant).",
            ),
        ),
        migrations.RunPython(grants_record, migrations.RunPython.noop),
    ]
