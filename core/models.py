"""Abstract models the apps' rows share. Abstract only: core is no app and owns no table."""

from typing import ClassVar

from django.db import models


class LongJobRow(models.Model):
    """The row of a long background job, which owns the job's state (core.leases): a worker
    takes its lease, renews it while it works (the lease's deadline is the job's heartbeat),
    writes the end only while the lease is its own, and beat reaps it once the deadline passed.

    A kind declares its state field (a `TextChoices` field, `STATE_FIELD` names it) and the
    states it never leaves (`FINAL_STATES`)."""

    STATE_FIELD: ClassVar[str] = "state"
    FINAL_STATES: ClassVar[tuple[str, ...]] = ()

    # The worker running it and until when; beat reaps it once that has passed.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def is_final(self) -> bool:
        return getattr(self, self.STATE_FIELD) in self.FINAL_STATES
