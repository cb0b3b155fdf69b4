"""The trainer's events on its own disk until Kestrel has stored them (training.process.events
sends them): a Redis or a Kestrel that is away costs the run none of them."""

import json
from collections import deque
from pathlib import Path

KEPT_ALWAYS = {"started", "train_start", "epoch", "checkpoint", "final", "train_end"}
KEPT_ALWAYS |= {"done", "error"}  # never dropped from a full spool


class Spool:
    """The trainer's events on its own disk, in order (one JSON line each), until Kestrel has
    them: `sent` marks what went out, `kept` what Kestrel confirmed it stored. A Redis that is
    away costs memory nothing, and one that comes back empty gets again what it lost (what went
    out but was not confirmed). Bounded: once full, only the events a run cannot do without are
    kept (epochs, checkpoints, results, the last word); console lines and system samples past
    the bound are counted and said to be missing."""

    COMPACT_BYTES = 1 << 20

    def __init__(self, path: Path, max_bytes: int):
        self.path, self.max_bytes = path, max_bytes
        self._file = None
        self.kept = self.sent = self.size = 0
        self._marks: deque[tuple[int, int]] = deque()  # (seq, offset after it), unconfirmed
        self.skipped = 0

    def __bool__(self) -> bool:
        """Whether something is still to be sent."""
        return self.size > self.sent

    def append(self, kind: str, fields: dict, seq: int, *, sent: bool = False) -> None:
        line = (json.dumps(fields) + "\n").encode()
        if self.size - self.kept + len(line) > self.max_bytes and kind not in KEPT_ALWAYS:
            self.skipped += 1
            return
        if self._file is None:
            self._file = open(self.path, "w+b")  # noqa: SIM115 - held while the process lives
        self._file.seek(self.size)
        self._file.write(line)
        self._file.flush()
        self.size += len(line)
        self._marks.append((seq, self.size))
        if sent and self.sent == self.size - len(line):
            self.sent = self.size

    def read(self, count: int) -> list[tuple[dict, int]]:
        """Up to `count` entries not sent yet, oldest first, each with the offset after it."""
        self._file.seek(self.sent)
        entries, offset = [], self.sent
        while len(entries) < count and offset < self.size:
            line = self._file.readline()
            offset += len(line)
            entries.append((json.loads(line), offset))
        return entries

    def sent_to(self, offset: int) -> None:
        self.sent = max(self.sent, offset)

    def advance(self, offset: int) -> None:
        """Sent and confirmed up to `offset` (a request's answer says so)."""
        self.sent_to(offset)
        while self._marks and self._marks[0][1] <= offset:
            self.kept = self._marks.popleft()[1]
        self._compact()

    def kept_to(self, seq: int) -> None:
        """Kestrel confirmed it stored every event up to sequence number `seq`."""
        while self._marks and self._marks[0][0] <= seq and self._marks[0][1] <= self.sent:
            self.kept = self._marks.popleft()[1]
        self._compact()

    def rewind(self) -> None:
        """Send again all that was not confirmed (the Redis it went to may have lost it)."""
        self.sent = self.kept

    def _compact(self) -> None:
        if self.kept == self.size:  # all confirmed: start the file again
            if self._file is not None and self.size:
                self._file.truncate(0)
            self.kept = self.sent = self.size = 0
        elif self.kept >= self.COMPACT_BYTES:  # keep only the unconfirmed tail
            self._file.seek(self.kept)
            tail = self._file.read(self.size - self.kept)
            self._file.seek(0)
            self._file.write(tail)
            self._file.truncate(len(tail))
            self._file.flush()
            shift = self.kept
            self._marks = deque((seq, end - shift) for seq, end in self._marks)
            self.kept, self.sent, self.size = 0, self.sent - shift, self.size - shift
