from django.core.management.base import BaseCommand, CommandError

from billing.ledger import accounts_reconcile, credits_format


class Command(BaseCommand):
    help = "Recompute every credit account from its ledger entries and report differences."

    def handle(self, *args, **options):
        differences = accounts_reconcile()
        for d in differences:
            self.stdout.write(
                f"{d['account']} (account {d['account'].pk}): "
                f"balance {credits_format(d['balance'])}, entries say "
                f"{credits_format(d['balance_expected'])}; "
                f"held {credits_format(d['held'])}, "
                f"entries say {credits_format(d['held_expected'])}"
            )
        if differences:
            raise CommandError(f"{len(differences)} account(s) differ from their ledger.")
        self.stdout.write("Every account matches its ledger.")
