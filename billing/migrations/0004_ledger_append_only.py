"""Ledger rows are append-only in the database itself: UPDATE and DELETE raise, even raw SQL.

Row triggers, so PostgreSQL's TRUNCATE (what the test suite's flush uses) still empties the
table; on SQLite `manage.py flush` refuses while ledger rows exist. Also fills the new plan
limits of the standard plans that already existed (their new columns only just appeared, so no
admin edit is overwritten).
"""

from django.db import migrations

GB = 1000**3
MICRO = 1_000_000
NEW_LIMITS = {
    "free": dict(signup_credits=5 * MICRO, monthly_credits=0, max_concurrent_jobs=1,
                 storage_quota_bytes=10 * GB, max_deployments=1),
    "pro": dict(signup_credits=20 * MICRO, monthly_credits=20 * MICRO, max_concurrent_jobs=4,
                storage_quota_bytes=200 * GB, max_deployments=5),
    "enterprise": dict(signup_credits=100 * MICRO, monthly_credits=500 * MICRO,
                       max_concurrent_jobs=20, storage_quota_bytes=5000 * GB, max_deployments=50),
}

MESSAGE = "billing_ledgerentry is append-only: ledger rows are never changed or deleted"

POSTGRES_UP = [
    f"""
    CREATE OR REPLACE FUNCTION billing_ledgerentry_append_only() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION '{MESSAGE}' USING ERRCODE = 'raise_exception';
    END;
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE TRIGGER billing_ledgerentry_append_only
    BEFORE UPDATE OR DELETE ON billing_ledgerentry
    FOR EACH ROW EXECUTE FUNCTION billing_ledgerentry_append_only();
    """,
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS billing_ledgerentry_append_only ON billing_ledgerentry;",
    "DROP FUNCTION IF EXISTS billing_ledgerentry_append_only();",
]
SQLITE_UP = [
    f"""
    CREATE TRIGGER billing_ledgerentry_no_update BEFORE UPDATE ON billing_ledgerentry
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;
    """,
    f"""
    CREATE TRIGGER billing_ledgerentry_no_delete BEFORE DELETE ON billing_ledgerentry
    BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END;
    """,
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS billing_ledgerentry_no_update;",
    "DROP TRIGGER IF EXISTS billing_ledgerentry_no_delete;",
]


def _run(schema_editor, statements):
    for sql in statements:
        schema_editor.execute(sql)


def triggers_create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        _run(schema_editor, POSTGRES_UP)
    elif vendor == "sqlite":
        _run(schema_editor, SQLITE_UP)
    else:
        raise NotImplementedError(f"No append-only triggers for {vendor}.")


def triggers_drop(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    _run(schema_editor, POSTGRES_DOWN if vendor == "postgresql" else SQLITE_DOWN)


def plan_limits_fill(apps, schema_editor):
    Plan = apps.get_model("billing", "Plan")
    for slug, limits in NEW_LIMITS.items():
        Plan.objects.filter(slug=slug).update(**limits)


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_credit_ledger")]

    operations = [
        migrations.RunPython(triggers_create, triggers_drop),
        migrations.RunPython(plan_limits_fill, migrations.RunPython.noop),
    ]
