"""What training tells other apps, so that it imports none of them (sweeps listens)."""

from django.dispatch import Signal

# Sent once the transaction that ended a job's run commits: it succeeded, failed, was canceled,
# or was stopped (a stopped job may be resumed later). Argument: `job`, the TrainingJob.
job_ended = Signal()
