"""Whether a trainer still makes progress: the supervisor's watch on the trainer's work, not on
its own liveness (the lease is that).

Progress is what the trainer reports of its work: a training batch, a validation batch, an
epoch, a checkpoint, the final validation's results, the end. Between two of them the run may be
silent for as long as its own pace allows: FACTOR times the longest gap it has shown so far in
this attempt, twice that during the first epoch and during validation, never under the floor
nor over the ceiling (settings). A phase whose length nothing has shown yet (starting: loaders,
caches, the first batch; the first validation before its first batch; the end, after the final
validation) gets the ceiling. Time spent waiting out a fault of Redis or the database is not the
trainer's silence: the watch starts again when the fault clears, and the gap across it teaches
nothing.

Plain Python on a clock passed in (the supervisor's: when each event entered the Redis stream,
so the trainer's own pace, however late the supervisor reads it), tested without a run.
"""

from dataclasses import dataclass

# What the trainer says of its work (training.event_schema's kinds); logs and system samples
# come from threads that go on while the training loop is stuck, so they are not progress,
# except while the trainer starts (its only word then: scanning labels, building the model).
PROGRESS = frozenset(
    ("train_start", "batch", "val_batch", "epoch", "checkpoint", "final", "train_end")
    + ("done", "error")
)

STARTING, TRAINING, VALIDATING, FINISHING, ENDING = (
    "starting",
    "training",
    "validating",
    "finishing",
    "ending",
)


# What the trainer was doing, as a person is told: "no progress for 81 s while validating".
PHASE_WORDS = {
    STARTING: "starting",
    TRAINING: "training",
    VALIDATING: "validating",
    FINISHING: "saving its results",
    ENDING: "exiting",
}


@dataclass(frozen=True)
class Stall:
    silent: float  # seconds without progress
    allowance: float  # what the run's pace allowed


class Watchdog:
    def __init__(self, *, floor: float, ceiling: float, factor: float, now: float):
        self.floor = floor
        self.ceiling = max(ceiling, floor)
        self.factor = factor
        self.last = now  # the last progress, or the start, or the end of a fault
        self.measured = False  # whether the gap since `last` is one to learn the pace from
        self.longest = 0.0  # the longest learned gap between two signs of progress
        self.phase = STARTING
        self.epochs = 0  # epochs ended in this attempt
        self.val_batches = 0  # validation batches seen in the validation under way
        self.validations = 0  # validations ended in this attempt

    def event(self, kind: str, data, now: float) -> bool:
        """Record an event of the trainer; True if it was progress."""
        if kind not in PROGRESS:
            if self.phase == STARTING and kind == "log":
                self.last = max(self.last, now)  # starting up says what it does, nothing else
                return True
            return False
        if self.measured:
            self.longest = max(self.longest, now - self.last)
        self.last = max(self.last, now)  # an event sent before a fault cleared starts nothing
        if kind == "batch":
            last_batch = data.batches and data.batch >= data.batches
            self.phase = VALIDATING if last_batch else TRAINING  # validation follows the last
            self.val_batches = 0
        elif kind == "val_batch":
            self.phase = VALIDATING
            self.val_batches += 1
        elif kind in ("epoch", "checkpoint"):
            if kind == "epoch":
                self.epochs += 1
                if self.phase == VALIDATING:
                    self.validations += 1
            final = kind == "epoch" and data.epochs and data.epoch >= data.epochs
            self.phase = VALIDATING if final else TRAINING  # after the last: the final validation
            self.val_batches = 0
        elif kind in ("final", "train_end"):
            self.phase = FINISHING
        elif kind == "train_start":
            self.phase = STARTING
        else:  # done, error: the trainer is exiting
            self.phase = ENDING
        # A gap from here teaches the pace, except the first validation's set-up (its loader).
        self.measured = self.phase == TRAINING or (
            self.phase == VALIDATING and (self.val_batches > 0 or self.validations > 0)
        )
        return True

    def fault_cleared(self, now: float) -> None:
        """Redis or the database is back: the trainer's events were held up, not missing."""
        self.last = now
        self.measured = False

    def allowance(self) -> float:
        paced = self.factor * self.longest
        if self.phase == STARTING or self.phase == FINISHING:
            return self.ceiling
        if self.phase == ENDING:
            return self.floor
        if self.phase == VALIDATING:
            if self.val_batches == 0 and self.validations == 0:
                return self.ceiling  # the first validation's set-up: nothing shows its length
            paced *= 2
        elif self.epochs == 0:
            paced *= 2  # the first epoch: caches warm, the pace settles
        if self.longest == 0:
            return self.ceiling
        return min(self.ceiling, max(self.floor, paced))

    def stalled(self, now: float) -> Stall | None:
        silent = now - self.last
        allowance = self.allowance()
        return Stall(silent=silent, allowance=allowance) if silent > allowance else None
