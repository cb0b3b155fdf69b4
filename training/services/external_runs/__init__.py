"""External training jobs: a run of stock `ultralytics` on the user's own machine that reports to
Kestrel's platform webhooks (training.platform_webhooks), kept like a job Kestrel ran: its
epochs, console, system samples, results and model, in the same rows the job page reads, the
epochs, console and system samples through the writer a supervised run's go through
(training.process.writer), after the client's hostile input is checked here.

The client sends its events from a thread pool, so they arrive out of order, some twice and
some never: every write here is idempotent (an epoch once by its number, a console chunk once
by its id) and taken under the job's row lock. Once the run has ended nothing of it changes:
every event for it is refused (RunEnded, 410), and so is every upload URL of an attempt that
has ended (training.services.external_uploads). Such a job is never metered (the machine is
the user's) and never queued: the reaper of Kestrel's jobs does not know it (no heartbeat); a
run whose client has gone silent for TRAINING_EXTERNAL_SILENT_SECONDS is marked lost here
(`external_runs_reap`).

The package's modules: client_input (the client's values, checked), runs (a run's identity,
start, resume and the reaper of silent ones) and events (epochs, console, the end). Its public
names are here too: core.leases registers the reaper by this package's path
(training.apps)."""

from training.services.external_runs.client_input import slug
from training.services.external_runs.events import (
    MAX_CONSOLE_CHARS,
    MAX_MATRIX,
    external_complete,
    external_console,
    external_epoch,
)
from training.services.external_runs.runs import (
    WORKER,
    external_run_resume,
    external_run_start,
    external_runs_reap,
    project_for_run,
    run_cancelled,
    run_live_check,
)

__all__ = [
    "MAX_CONSOLE_CHARS",
    "MAX_MATRIX",
    "WORKER",
    "external_complete",
    "external_console",
    "external_epoch",
    "external_run_resume",
    "external_run_start",
    "external_runs_reap",
    "project_for_run",
    "run_cancelled",
    "run_live_check",
    "slug",
]
