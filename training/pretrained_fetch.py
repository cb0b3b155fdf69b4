"""Downloading a pretrained checkpoint while a job prepares, into TRAINING_WEIGHTS_DIR.

Only when TRAINING_ALLOW_DOWNLOADS is on and the file is not there yet. The form cannot know
whether the worker is online, so a download that fails ends the job at once, before its
trainer starts, with a reason and no Resume (FailureKind.DOWNLOAD): it would fail again.

Ultralytics downloads it, in a process of its own (`python -m training.pretrained_fetch NAME
FOLDER`): the worker never imports Ultralytics and torch. The file lands in the worker's own
folder first and is moved into place whole, so two jobs downloading it at once each see a whole
file or none; the next job, and the form, find it there.

Whether the server can reach the source is asked once in a while (weights_source_reach), so the
form offers a download as its default only where one has been seen to work; and checkpoints a
person's own Ultralytics already downloaded (its settings' weights folder) are used in place
(ultralytics_cached_weights).
"""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

# Long enough for the largest published checkpoint (yolo11x-seg, ~120 MB) over a slow link.
FETCH_TIMEOUT_SECONDS = 30 * 60
_REASON = "kestrel-fetch: "


class WeightsDownloadFailed(Exception):
    """The message says what to do instead."""


def pretrained_fetch(
    weights,
    *,
    workdir: Path,
    env: dict[str, str],
    keep_alive: Callable[[], object],
    every: float,
) -> Path:
    """Download `weights` (a training.services.arguments.PretrainedWeights that is not present)
    to weights.path; `keep_alive()` is called every `every` seconds meanwhile (the supervisor
    renews its lease). Raises WeightsDownloadFailed saying why."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "download.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own module, arguments we wrote
            [sys.executable, "-m", "training.pretrained_fetch", weights.name, str(workdir)],
            cwd=Path(__file__).resolve().parents[1],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        while True:
            try:
                code = proc.wait(timeout=every)
                break
            except subprocess.TimeoutExpired:
                keep_alive()
                if time.monotonic() - started > FETCH_TIMEOUT_SECONDS:
                    proc.kill()
                    proc.wait()
                    code = None
                    break
    downloaded = workdir / weights.name
    if code == 0 and downloaded.is_file():
        try:
            weights.path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(downloaded, weights.path)
        except OSError as e:
            raise WeightsDownloadFailed(
                f"{weights.name} was downloaded but could not be put in {weights.folder} "
                f"({e.strerror}); make that folder writable by the worker, or train from scratch."
            ) from None
        return weights.path
    if code is None:
        why = f"it took longer than {FETCH_TIMEOUT_SECONDS // 60} minutes"
    else:
        why = _last_reason(log) or f"the download ended with exit status {code}"
    why = why.rstrip(".")  # Ultralytics' own ends with one ("... may be offline."): not two
    raise WeightsDownloadFailed(
        f"Could not download the pretrained weights {weights.name}: {why}. Put {weights.name} "
        f"in {weights.folder}, or train from scratch (the form offers a download only once "
        "the server has reached the source)."
    )


# Where Ultralytics downloads its published checkpoints from (ultralytics/assets releases, as
# utils/downloads.py::attempt_download_asset says); an operator with a mirror, and the tests, set
# TRAINING_WEIGHTS_SOURCE_URL.
WEIGHTS_SOURCE_URL = "https://github.com/ultralytics/assets/releases"
# A reachable source answers in well under a second; an offline one must not hold the form up.
REACH_TIMEOUT_SECONDS = 2.0
# How long an answer is believed: a success for an hour, a failure for five minutes (a network
# that comes back is seen soon).
REACHED_SECONDS, UNREACHED_SECONDS = 60 * 60, 5 * 60


@dataclass(frozen=True)
class SourceReach:
    """What the server saw when it last tried the weights' source."""

    url: str
    reachable: bool
    checked_at: datetime
    reason: str = ""  # why not, in words

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or self.url

    @property
    def sentence(self) -> str:
        """ "the server reached github.com at 12:03" (server time), or why it could not."""
        from django.utils import timezone

        at = timezone.localtime(self.checked_at).strftime("%H:%M")
        if self.reachable:
            return f"the server reached {self.host} at {at}"
        return f"the server could not reach {self.host} at {at} ({self.reason})"


def weights_source_url() -> str:
    from django.conf import settings

    return getattr(settings, "TRAINING_WEIGHTS_SOURCE_URL", "") or WEIGHTS_SOURCE_URL


def weights_source_reach() -> SourceReach:
    """Whether this server can reach the source of pretrained weights: one HEAD request, at most
    once per REACHED_SECONDS / UNREACHED_SECONDS, the answer kept in the cache for every process.
    The web server asks, while a worker downloads; on one machine, or one network, they agree."""
    from django.core.cache import cache

    url = weights_source_url()
    key = f"training:weights-source-reach:{url}"
    kept = cache.get(key)
    if kept:
        return SourceReach(
            url=url,
            reachable=kept["reachable"],
            checked_at=datetime.fromisoformat(kept["checked_at"]),
            reason=kept["reason"],
        )
    reach = _reach(url)
    cache.set(
        key,
        {
            "reachable": reach.reachable,
            "checked_at": reach.checked_at.isoformat(),
            "reason": reach.reason,
        },
        REACHED_SECONDS if reach.reachable else UNREACHED_SECONDS,
    )
    return reach


def _reach(url: str) -> SourceReach:
    import httpx
    from django.utils import timezone

    reason = ""
    try:
        # Any answer is a reachable host (GitHub answers a release page with a redirect).
        httpx.head(url, timeout=REACH_TIMEOUT_SECONDS, follow_redirects=False)
    except httpx.TimeoutException:
        reason = f"no answer within {REACH_TIMEOUT_SECONDS:g} s"
    except httpx.ConnectError as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, socket.gaierror) or "name" in str(e).lower():
            reason = "its name does not resolve: no internet access?"
        elif "refused" in str(e).lower():
            reason = "connection refused"
        else:
            reason = " ".join(str(e).split())[:200] or "could not connect"
    except httpx.HTTPError as e:
        reason = " ".join(str(e).split())[:200] or type(e).__name__
    return SourceReach(url=url, reachable=not reason, checked_at=timezone.now(), reason=reason)


def ultralytics_cached_weights(name: str) -> Path | None:
    """`name` in the weights folder of the person's own Ultralytics (its settings.json, in
    YOLO_CONFIG_DIR or the platform's config folder, as docs.ultralytics.com/quickstart/
    #ultralytics-settings describes), where `yolo` and Ultralytics' attempt_download_asset look
    for checkpoints; None when it is not there. Read from the file, not by importing Ultralytics:
    the form runs in the web process, which does not load torch."""
    for config in _ultralytics_config_dirs():
        try:
            folder = json.loads((config / "settings.json").read_text(encoding="utf-8")).get(
                "weights_dir"
            )
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(folder, str) and folder and (Path(folder) / name).is_file():
            return Path(folder) / name
    return None


def _ultralytics_config_dirs() -> list[Path]:
    if os.environ.get("YOLO_CONFIG_DIR"):
        return [Path(os.environ["YOLO_CONFIG_DIR"]).expanduser() / "Ultralytics"]
    home = Path.home()
    if sys.platform == "darwin":
        return [home / "Library" / "Application Support" / "Ultralytics"]
    if sys.platform == "win32":
        return [home / "AppData" / "Roaming" / "Ultralytics"]
    return [Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "Ultralytics"]


def _last_reason(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    reasons = [line[len(_REASON) :] for line in lines if line.startswith(_REASON)]
    return reasons[-1].strip()[:500] if reasons else ""


def main(argv: list[str]) -> int:
    """Download Ultralytics' published checkpoint `name` into `folder`; exit 0 when it is
    there, else print the reason on a line of its own."""
    name, folder = argv
    from ultralytics.utils.downloads import GITHUB_ASSETS_NAMES, attempt_download_asset

    if name not in GITHUB_ASSETS_NAMES:
        print(f"{_REASON}Ultralytics publishes no {name}", flush=True)
        return 2
    target = Path(folder) / name
    try:
        attempt_download_asset(target)
    except Exception as e:  # noqa: BLE001 - every failure becomes the job's reason
        # Ultralytics' message, without its emoji: "Download failure for <url>. ..."
        text = " ".join(str(e).split()).lstrip("❌ ") or type(e).__name__
        print(f"{_REASON}{text}", flush=True)
        return 1
    if not target.is_file():
        print(f"{_REASON}Ultralytics did not write {name}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
