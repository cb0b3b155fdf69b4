"""Measure and cache every model's FLOPs at 640 px, so no estimate waits for a measurement."""

from django.core.management.base import BaseCommand

from training.estimator import flops_warm


class Command(BaseCommand):
    help = "Measure (in subprocesses) and cache the FLOPs of every family × size × task at 640."

    def handle(self, *args, **options):
        for name, cost in flops_warm():
            if isinstance(cost, str):
                self.stdout.write(f"{name}: {cost}")
            else:
                self.stdout.write(f"{name}: {cost.gflops:.1f} GFLOPs, {cost.params:,} parameters")
