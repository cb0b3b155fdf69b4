"""An attempt's checkpoints (training.process.supervisor): each copied out of the attempt's own
folder on the machine, inspected as an upload is (one worker process for the attempt, each file
once by its digest), and only then stored; one that fails inspection ends the run, and one that
storage cannot take is said on the page, and after several in a row stops the run."""

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.storage import storage_delete, storage_put
from training import event_schema as schema
from training.models import JobState
from training.run_files import MAX_WEIGHTS_BYTES, checkpoints_prune, run_file_open
from training.services.jobs import job_state_bump
from training.streams import control_key
from training.weights_check import REFUSED_PREFIX

logger = logging.getLogger(__name__)


class WeightsRefused(Exception):
    """A checkpoint of the attempt failed inspection; the message says why."""


class Checkpoints:
    """The Supervisor's checkpoints."""

    def _on_checkpoint(self, event: schema.Checkpoint, seq: int) -> None:
        """Store last-<epoch>.pt (and best-<epoch>.pt) from this attempt's own checkpoint
        folder, then delete the older ones there: never a file anywhere else. Each is copied
        out of the folder and inspected first, and the very bytes inspected are stored; one
        that fails is stored nowhere, and ends the run (`refused`)."""
        if self.refused or self._cancel_seen():
            return
        base, folder = Path(self.machine.workdir), self._checkpoint_parts()
        stored = {}  # best first: last.pt names the epoch resumed from, so it goes in last
        best = event.epoch if event.best else self.best_skipped
        if best is not None:
            stored[f"best-{best}.pt"] = ("best.pt (training)", self.job.best_key)
        stored[f"last-{event.epoch}.pt"] = ("last.pt", self.job.checkpoint_key)
        with tempfile.TemporaryDirectory(prefix="kestrel-checkpoint-") as tmp:
            try:
                copies = {name: self._inspected_copy((*folder, name), Path(tmp)) for name in stored}
            except WeightsRefused as e:
                self._weights_refused(
                    f"The checkpoint of epoch {event.epoch} was refused and deleted: {e}. The "
                    "run was stopped and its checkpoints deleted: a run whose trainer writes "
                    "such files is not resumed."
                )
                checkpoints_prune(base, *folder, stored=event.epoch + 1)  # nobody keeps it
                return
            with self._fenced():
                for name, (_, key) in stored.items():
                    with open(copies[name], "rb") as f:
                        try:
                            storage_put(key, f, replace=True)
                        except OSError as e:  # storage's fault (a full disk), not the file's
                            self._checkpoint_not_stored(event.epoch, e)
                            return
                self.store_failures = 0
                self.best_skipped = None
                artifacts, inspected = dict(self.job.artifacts), dict(self.job.inspected_weights)
                for artifact, key in stored.values():
                    artifacts[artifact] = inspected[artifact] = key
                notice = {"notice": ""} if self.job.notice else {}
                self._save_job(
                    checkpoint_epoch=event.epoch,
                    artifacts=artifacts,
                    inspected_weights=inspected,
                    **notice,
                )
                if notice:
                    job_state_bump(self.job.pk)
        checkpoints_prune(base, *folder, stored=event.epoch)  # stored now: the older ones go

    def _checkpoint_superseded(self, event: schema.Checkpoint) -> None:
        """A later checkpoint was read with this one: only the later is stored (its files
        supersede these, which its storing prunes), and this one's best-<epoch>.pt with it when
        this was the best and the later is not."""
        if event.best:
            self.best_skipped = event.epoch

    def _cancel_seen(self) -> bool:
        """Whether the job was cancelled meanwhile: a cancelled run stores nothing more, and is
        not kept waiting for the inspection of what it would not keep."""
        if not self.canceling and self.redis.get(control_key(self.job.pk)) == b"cancel":
            self.canceling = True
            self.provider.terminate(self.handle, force=True)
        return self.canceling

    def _inspected_copy(self, parts: tuple[str, ...], folder: Path) -> Path:
        """A copy in `folder` of the machine's file workdir/parts... (opened as run_files
        opens them), once it passed the inspection every stored checkpoint passes; raises
        WeightsRefused saying why when it did not, OSError when there is no such plain file.
        The lease is kept while the inspector works."""
        name = parts[-1]
        copy = folder / name
        digest = hashlib.sha256()
        with (
            run_file_open(Path(self.machine.workdir), *parts, max_bytes=MAX_WEIGHTS_BYTES) as f,
            open(copy, "xb") as out,
        ):
            while block := f.read(1 << 20):
                digest.update(block)
                out.write(block)
        key = digest.hexdigest()
        if key not in self.inspected:
            answer = self.inspector.inspect(
                copy,
                name,
                keep_alive=self._inspection_keep_alive,
                every=settings.TRAINING_HEARTBEAT_SECONDS,
            )
            if len(self.inspected) > 16:
                self.inspected.clear()
            self.inspected[key] = answer.error or ""
        if error := self.inspected[key]:
            if error.startswith(REFUSED_PREFIX):
                why = error.removeprefix(REFUSED_PREFIX).rstrip(".")
            else:
                why = f"{name} could not be inspected ({error.rstrip('.')})"
            raise WeightsRefused(why)
        return copy

    def _inspection_keep_alive(self) -> None:
        if not self._lease_renew():
            self.lost_lease = True

    def _weights_refused(self, message: str) -> None:
        """A file of this attempt failed inspection: the trainer is stopped at once, nothing
        more of it is stored, and the attempt ends failed with `message` (_finish)."""
        logger.warning("job %s: %s", self.job.pk, message)
        self.refused = message[:2000]
        if self.handle is not None:
            self.provider.terminate(self.handle, force=True)

    def _checkpoints_drop(self) -> None:
        """In the fence: the job's stored checkpoints go (a refused run keeps none)."""
        job = self.job
        kept = {name: key for name, key in job.artifacts.items() if not key.endswith(".pt")}
        self._save_job(artifacts=kept, inspected_weights={}, checkpoint_epoch=None)
        for key in (job.best_key, job.checkpoint_key):
            transaction.on_commit(lambda key=key: storage_delete(key))

    def _checkpoint_not_stored(self, epoch: int, error: OSError) -> None:
        """Say so on the job page; after several in a row, stop the run (its last stored
        checkpoint kept) rather than train on with nothing to resume from."""
        self.store_failures += 1
        reason = (os.strerror(error.errno) if error.errno else str(error)).lower()
        kept = self.job.checkpoint_epoch
        since = f"the last stored is epoch {kept}'s" if kept else "none is stored yet"
        notice = f"Checkpoint at epoch {epoch} not stored: {reason}; {since}."
        logger.warning("job %s: %s (%s in a row)", self.job.pk, notice, self.store_failures)
        self._save_job(notice=notice)
        job_state_bump(self.job.pk)
        limit = settings.TRAINING_CHECKPOINT_STORE_FAILURES
        if self.store_failures >= limit and self.job.state == JobState.RUNNING:
            goes_on = f"from epoch {kept}" if kept else "from the start"
            self._transition(
                JobState.STOPPING,
                stop_requested_at=timezone.now(),
                error=f"{limit} checkpoints in a row could not be stored ({reason}); the run "
                f"stopped rather than train on without one. Free space, then Resume: it goes "
                f"on {goes_on}.",
            )
