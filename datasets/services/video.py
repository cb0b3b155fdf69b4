"""Videos in an upload, imported as the frames sampled from them.

`VideoFrames` wraps a Source: each video entry is replaced by virtual entries
`<folder>/<video stem>_<ms>.jpg`, one per sample time (so splits named by folders still apply),
and reading one decodes it with PyAV, one frame at a time, and encodes it as JPEG with Pillow.
The video's frames are never held together: the decoder yields a frame, the wanted ones are
encoded, the rest are dropped. Each video is copied once, chunk by chunk, to a temp file that
is removed when its frames are read. A video that cannot be opened, or has no video stream, is
listed in `skipped` (merged into the import's report); frames past the plan's cap per video, or
past the decode time limit, are said to be left out.
"""

import io
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import av
from django.conf import settings
from PIL import Image as PILImage

from core.errors import ServiceError
from datasets.services.archive import Entry, EntryError, Source
from datasets.services.formats import SKIP_FILE, SKIP_IMAGE

logger = logging.getLogger(__name__)

VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi")
FPS_DEFAULT = 1.0
FPS_MIN = 0.1
FPS_MAX = 30.0
JPEG_QUALITY = 90
# Past this gap to the next sample time, seek (to the keyframe before it) instead of decoding
# every frame in between.
SEEK_GAP_SECONDS = 2.0


def is_video(name: str) -> bool:
    return name.lower().endswith(VIDEO_SUFFIXES)


def video_fps_check(value) -> float:
    """The frames per second to sample from videos, as given by a person; ServiceError if not
    a number from FPS_MIN to FPS_MAX."""
    if value is None or value == "":
        return FPS_DEFAULT
    try:
        fps = float(value)
    except (TypeError, ValueError):
        raise ServiceError(
            "Frames per second from videos must be a number, e.g. 1 or 0.5."
        ) from None
    if not math.isfinite(fps) or not FPS_MIN <= fps <= FPS_MAX:
        raise ServiceError(
            f"Frames per second from videos must be from {FPS_MIN:g} to {FPS_MAX:g}; "
            f"{value} was given."
        )
    return round(fps, 3)


@dataclass
class _Video:
    name: str  # the video's entry
    path: str  # its temp copy
    width: int
    height: int
    frames: list[tuple[str, int]] = field(default_factory=list)  # (frame entry, ms)


class VideoFrames(Source):
    """`inner`'s entries with each video replaced by its sampled frames. Probing (copying each
    video to a temp file and reading its duration) happens when the entries are first asked for,
    so it runs inside the import and its lease."""

    def __init__(
        self,
        inner: Source,
        *,
        fps: float = FPS_DEFAULT,
        max_frames: int = 3000,
        max_seconds: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.inner = inner
        self.kind = getattr(inner, "kind", "files")
        self.fps = fps
        self.max_frames = max_frames
        self.max_seconds = (
            settings.DATASET_VIDEO_MAX_SECONDS if max_seconds is None else max_seconds
        )
        self.progress = progress
        self.skipped: list[tuple[str, str, str]] = []  # file, reason, SKIP_* kind
        self._videos: dict[str, _Video] = {}  # frame entry -> its video
        self._ms: dict[str, int] = {}  # frame entry -> its time
        self._probed = False
        self.frames_done = 0
        self.frames_total = 0
        self.decode_seconds = 0.0

    @property
    def entries(self) -> list[Entry]:
        self._probe()
        return list(self._entries.values())

    # --- probing --------------------------------------------------------------------------

    def _probe(self) -> None:
        if self._probed:
            return
        self._probed = True
        inner = self.inner.entries
        taken = {e.name for e in inner if not is_video(e.name)}
        entries: dict[str, Entry] = {}
        for entry in inner:
            if not is_video(entry.name) or _hidden(entry.name):
                entries[entry.name] = entry  # the import ignores hidden files: left to it
                continue
            video = self._open(entry)
            if video is None:
                continue
            for name, ms in video.frames:
                if name in taken:
                    self.skipped.append(
                        (
                            name,
                            f"a frame of {entry.name}, but a file of that name is in the upload",
                            SKIP_IMAGE,
                        )
                    )
                    continue
                taken.add(name)
                # The JPEG's size is not known before it is encoded: a guess, never a limit.
                entries[name] = Entry(name=name, size=max(1, video.width * video.height // 8))
                self._videos[name] = video
                self._ms[name] = ms
        self._entries = entries
        self.frames_total = len(self._videos)
        if self.progress and self.frames_total:
            self.progress(0, self.frames_total)

    def _open(self, entry: Entry) -> _Video | None:
        """Copy the video to a temp file and plan its sample times; None (and listed) if it
        cannot be read."""
        suffix = PurePosixPath(entry.name).suffix.lower()
        fd, path = tempfile.mkstemp(prefix="kestrel-video-", suffix=suffix)
        keep = False
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    self.inner.copy_to(entry.name, out)
                except EntryError as e:
                    self.skipped.append((entry.name, str(e), SKIP_FILE))
                    return None
            try:
                width, height, duration = _probe_file(path)
            except _NotAVideo as e:
                self.skipped.append((entry.name, str(e), e.kind))
                return None
            count = max(1, math.ceil(duration * self.fps - 1e-6))
            shown = min(count, self.max_frames)
            if count > self.max_frames:
                reason = (
                    f"{count - shown:,} of its {count:,} frames at {self.fps:g} per second left "
                    f"out: the plan takes at most {self.max_frames:,} frames from one video "
                    "(pick fewer frames per second to cover all of it)"
                )
                self.skipped.append((entry.name, reason, SKIP_IMAGE))
            stem = entry.name[: -len(suffix)] if suffix else entry.name
            video = _Video(name=entry.name, path=path, width=width, height=height)
            for i in range(shown):
                ms = round(i * 1000 / self.fps)
                video.frames.append((f"{stem}_{ms}.jpg", ms))
            keep = True
            return video
        finally:
            if not keep:
                _remove(path)

    # --- reading --------------------------------------------------------------------------

    def read(self, name: str) -> bytes:
        video = self._videos.get(name)
        if video is None:
            return self.inner.read(name)
        for _, data in self._decode(video, [(name, self._ms[name])], remove=False):
            if isinstance(data, EntryError):
                raise data
            return data
        raise EntryError("the video ends before this time")

    def copy_to(self, name: str, out) -> int:
        if name in self._videos:
            return super().copy_to(name, out)
        return self.inner.copy_to(name, out)

    def iter_read(self, names: list[str]) -> Iterator[tuple[str, bytes | EntryError]]:
        """In the entries' order: runs of the inner source's entries are read by it (sequential
        for tar); each video's frames are decoded in one pass, then its temp file removed."""
        self._probe()
        wanted = set(names)
        run: list[str] = []
        video: _Video | None = None
        frames: list[tuple[str, int]] = []
        for name in self._entries:
            if name not in wanted:
                continue
            owner = self._videos.get(name)
            if owner is None:
                if video is not None:
                    yield from self._decode(video, frames)
                    video, frames = None, []
                run.append(name)
                continue
            if run:
                yield from self.inner.iter_read(run)
                run = []
            if owner is not video:
                if video is not None:
                    yield from self._decode(video, frames)
                video, frames = owner, []
            frames.append((name, self._ms[name]))
        if run:
            yield from self.inner.iter_read(run)
        if video is not None:
            yield from self._decode(video, frames)

    def _decode(
        self, video: _Video, frames: list[tuple[str, int]], *, remove: bool = True
    ) -> Iterator[tuple[str, bytes | EntryError]]:
        """Each wanted frame as JPEG bytes: the first decoded frame at or after its time. The
        time limit counts time spent here, not while the import handles a yielded frame."""
        spent, resumed = 0.0, time.monotonic()
        pending = sorted(frames, key=lambda f: f[1])
        i = 0
        try:
            container = av.open(video.path)
        except (av.FFmpegError, OSError) as e:
            for name, _ in pending:
                yield name, EntryError(f"the video cannot be read ({_reason(e)})")
            if remove:
                _remove(video.path)
            return
        try:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            base = stream.time_base
            start = stream.start_time or 0
            seek_to: int | None = None  # ms
            sought = -1  # the sample a seek was last made for: never twice (keyframes far apart)
            while i < len(pending):
                if seek_to is not None:
                    container.seek(int(seek_to / 1000 / base) + start, stream=stream)
                    seek_to = None
                at_ms = -1.0
                for frame in container.decode(stream):
                    if frame.pts is None:
                        continue
                    at_ms = float((frame.pts - start) * base) * 1000
                    while i < len(pending) and at_ms >= pending[i][1] - 0.5:
                        data = _jpeg(frame)
                        spent += time.monotonic() - resumed
                        yield pending[i][0], data
                        resumed = time.monotonic()
                        i += 1
                        self._count()
                    del frame
                    if i >= len(pending):
                        break
                    if spent + time.monotonic() - resumed > self.max_seconds:
                        raise _OutOfTime
                    if pending[i][1] - at_ms > SEEK_GAP_SECONDS * 1000 and sought != i:
                        seek_to, sought = pending[i][1], i
                        break
                else:
                    break  # the stream ended
            for name, ms in pending[i:]:
                yield name, EntryError(f"the video ends before {ms} ms")
        except _OutOfTime:
            for name, _ in pending[i:]:
                yield (
                    name,
                    EntryError(
                        f"not decoded: {video.name} took more than {self.max_seconds:g} s to "
                        "decode (DATASET_VIDEO_MAX_SECONDS)"
                    ),
                )
        except av.FFmpegError as e:
            for name, _ in pending[i:]:
                yield name, EntryError(f"the video could not be decoded here ({_reason(e)})")
        finally:
            container.close()
            self.decode_seconds += spent + time.monotonic() - resumed
            if remove:
                _remove(video.path)

    def _count(self) -> None:
        self.frames_done += 1
        if self.progress and (self.frames_done % 10 == 0 or self.frames_done == self.frames_total):
            self.progress(self.frames_done, self.frames_total)

    def close(self) -> None:
        for path in {v.path for v in self._videos.values()}:
            _remove(path)
        self.inner.close()


class _OutOfTime(Exception):
    pass


class _NotAVideo(Exception):
    def __init__(self, message: str, kind: str = SKIP_FILE):
        super().__init__(message)
        self.kind = kind


def _reason(e: Exception) -> str:
    text = getattr(e, "strerror", None) or str(e)
    return text.split(": '", 1)[0][:200]


def _probe_file(path: str) -> tuple[int, int, float]:
    """The video stream's width, height and duration in seconds; _NotAVideo if none."""
    try:
        container = av.open(path)
    except (av.FFmpegError, OSError) as e:
        raise _NotAVideo(f"not a video that can be read ({_reason(e)})") from None
    try:
        if not container.streams.video:
            raise _NotAVideo("the file has no video stream")
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        if stream.duration:
            duration = float(stream.duration * stream.time_base)
        elif container.duration:
            duration = container.duration / av.time_base
        else:
            duration = _demuxed_duration(container, stream)
        if duration is None:
            raise _NotAVideo("the video has no frames", SKIP_IMAGE)
        if not width or not height:
            raise _NotAVideo("the video stream has no picture size")
        return width, height, max(duration, 0.0)
    except av.FFmpegError as e:
        raise _NotAVideo(f"not a video that can be read ({_reason(e)})") from None
    finally:
        container.close()


def _demuxed_duration(container, stream) -> float | None:
    """Where the last packet ends, read from the packets (no decoding), for a file that does
    not declare its duration; None if it has no packets."""
    start = stream.start_time or 0
    end = None
    for packet in container.demux(stream):
        if packet.pts is None:
            continue
        stop = packet.pts + (packet.duration or 0)
        end = stop if end is None else max(end, stop)
    if end is None:
        return None
    return float((end - start) * stream.time_base)


def _jpeg(frame) -> bytes:
    out = io.BytesIO()
    image: PILImage.Image = frame.to_image()
    image.save(out, "JPEG", quality=JPEG_QUALITY)
    image.close()
    return out.getvalue()


def _hidden(name: str) -> bool:
    """macOS's resource forks (__MACOSX/, ._clip.mp4) and other dot files: not videos."""
    low = name.lower()
    return low.startswith("__macosx/") or "/__macosx/" in low or low.rsplit("/", 1)[-1][:1] == "."


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
