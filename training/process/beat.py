"""The heartbeat of an attempt (training.process.supervisor): the lease renewed, the machine
time metered as the trainer makes progress (and stopped when credits or the job's budget cover
no more), stop and cancel passed on, and a cloud provider's phase followed."""

import logging
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.utils import timezone

from training.metering import meter, metered
from training.models import JobState, TrainingAttempt, TrainingJob
from training.providers import ProviderError
from training.services.jobs import job_state_bump, lease_seconds
from training.streams import PROGRESS_TTL, beat_key, control_key

logger = logging.getLogger(__name__)


class Beat:
    """The Supervisor's heartbeat and metering."""

    def _lease_renew(self) -> bool:
        now = timezone.now()
        fields = {"heartbeat_at": now, "lease_until": now + timedelta(seconds=lease_seconds())}
        if self.watchdog is not None:  # what the page says of a trainer gone quiet
            fields.update(
                progress_at=self.progress_at, stall_seconds=int(self.watchdog.allowance())
            )
        renewed = TrainingJob.objects.filter(pk=self.job.pk, lease_owner=self.worker).update(
            **fields
        )
        return bool(renewed)

    def _quiet(self, now) -> bool:
        """Whether the trainer's silence is past what the page warns of (the rule of
        training.selectors.job_quiet_seconds)."""
        if self.watchdog is None or self.progress_at is None:
            return False
        quiet = (now - self.progress_at).total_seconds()
        warn = max(self.watchdog.allowance() / 2, 2 * settings.TRAINING_HEARTBEAT_SECONDS)
        return quiet > warn

    def _billed_until(self, now):
        """Machine time is billed while the trainer makes progress: up to its last progress
        and one heartbeat (caught up as soon as it goes on; kept back if it hung). An attempt
        ends there too: a supervisor still storing what its trainer sent before exiting (each
        checkpoint inspected) charges nothing for its own lag."""
        if self.progress_at is None:
            return now
        return min(now, self.progress_at + timedelta(seconds=settings.TRAINING_HEARTBEAT_SECONDS))

    def _beat(self) -> None:
        """Heartbeat and lease renewal; read stop and cancel requests made since."""
        now = timezone.now()
        if not self._lease_renew():
            self.lost_lease = True
            return
        try:
            self.redis.set(beat_key(self.job.pk), f"{time.time():.3f}", ex=PROGRESS_TTL)
        except redis.RedisError:
            pass  # pages read the heartbeat from the database meanwhile
        quiet = self._quiet(now)
        if quiet != self.quiet_said:  # the page warns of a trainer gone quiet, and stops
            self.quiet_said = quiet
            job_state_bump(self.job.pk)
        state, stop_at, cancel_at = (
            TrainingJob.objects.filter(pk=self.job.pk)
            .values_list("state", "stop_requested_at", "cancel_requested_at")
            .get()
        )
        self.job.state = state
        reason = None
        if metered(self.job):
            reason = meter(self.attempt.pk, self._billed_until(now), holder=self.worker)
        if reason and not stop_at and state != JobState.STOPPING:
            # Credits (or the job's budget) cover no more: stop as a person would, keep the
            # checkpoints; a top-up and Resume continue the run.
            stop_at = now
            self._transition(JobState.STOPPING, stop_requested_at=now, error=reason)
        self._phase_check(now)
        if cancel_at and not self.canceling:
            self.canceling = True
            self.provider.terminate(self.handle, force=True)
        elif (stop_at or state == JobState.STOPPING) and not self.stop_sent:
            self.stop_sent = True
            self.redis.set(control_key(self.job.pk), "stop", ex=7 * 24 * 3600)

    def _phase_check(self, now) -> None:
        """A cloud provider's phase (queued, provisioning, setting up, running, recovering)
        onto the attempt, each with its time. Nothing waits for a machine for ever: past the
        GPU type's provisioning timeout with no word from the trainer, the run is cancelled
        at the provider and the attempt fails with the reason (its credits given back)."""
        phase_of = getattr(self.provider, "phase", None)
        if phase_of is None or self.handle is None or self.canceling:
            return
        try:
            report = phase_of(self.handle, trainer_reported=self.last_seq > 0)
        except ProviderError as e:
            logger.warning("job %s: the provider's phase: %s", self.job.pk, e)
            return
        if not self.phases or self.phases[-1]["phase"] != str(report.phase):
            self.phases.append(
                {"phase": str(report.phase), "label": report.phase.label, "at": now.isoformat()}
            )
            TrainingAttempt.objects.filter(pk=self.attempt.pk).update(provider_phases=self.phases)
        if report.reason and not self.last_seq:  # a trainer that spoke ends by its own word
            self.provider_failure = report.reason
        timeout = self.machine.details.get("provision_timeout_seconds")
        waiting = str(report.phase) in ("queued", "provisioning")
        if timeout and waiting and not self.last_seq:
            waited = (now - self.attempt.started_at).total_seconds()
            if waited > timeout:
                self.provider_failure = (
                    f"No machine of this type was ready within {timeout / 60:.0f} min "
                    f"({report.phase.label.lower()} at the provider); try another type or later."
                )
                self.canceling = True
                self.provider.terminate(self.handle, force=True)

    def _meter_end(self, until) -> None:
        """The machine time up to the attempt's end, charged before the lease is let go."""
        meter(self.attempt.pk, until, holder=self.worker)
