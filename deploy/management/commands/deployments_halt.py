"""Stop this machine's dedicated endpoint processes, keeping which should run: the next
supervisor check (beat, every 30 s) starts those again. `make run` runs it on Ctrl-C."""

from django.core.management.base import BaseCommand

from deploy.supervisor import deployments_halt


class Command(BaseCommand):
    help = __doc__

    def handle(self, *args, **options):
        halted = deployments_halt()
        if halted and options["verbosity"]:
            self.stdout.write(
                f"Stopped {halted} deployment process{'es' if halted != 1 else ''}; "
                "they start again with Kestrel."
            )
