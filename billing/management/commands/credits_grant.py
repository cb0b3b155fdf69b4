from decimal import Decimal

from django.core.management.base import BaseCommand, CommandError

from billing.ledger import account_for, credits_format, credits_grant
from core.errors import ServiceError
from core.money import to_micro
from workspaces.models import Workspace


class Command(BaseCommand):
    help = (
        "Grant credits to a workspace, with a reason, through the ledger (a new team starts "
        "with none). The Django admin does the same from a credit account's page."
    )

    def add_arguments(self, parser):
        parser.add_argument("workspace", help="The workspace's slug, as in /w/<slug>/.")
        parser.add_argument("credits", help="Credits to grant, e.g. 10 or 2.50.")
        parser.add_argument("--reason", required=True, help="Why: kept on the ledger entry.")

    def handle(self, *args, workspace: str, credits: str, reason: str, **options):
        target = Workspace.objects.filter(slug=workspace).first()
        if target is None:
            raise CommandError(f"No workspace {workspace!r}.")
        try:
            amount = to_micro(Decimal(credits))
        except (ArithmeticError, ValueError):
            raise CommandError(f"{credits!r} is not a number of credits.") from None
        try:
            credits_grant(target, amount, reason=reason)
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        available = credits_format(account_for(target).available)
        self.stdout.write(
            f"Granted {credits_format(amount)} credits to {target.slug}; {available} available."
        )
