"""Downloading a pretrained checkpoint while a job prepares, into TRAINING_WEIGHTS_DIR.

Only when TRAINING_ALLOW_DOWNLOADS is on and the file is not there yet. The form cannot know
whether the worker is online, so a download that fails ends the job at once, before its
trainer starts, with a reason and no Resume (FailureKind.DOWNLOAD): it would fail again.

Ultralytics downloads it, in a process of its own (`python -m training.pretrained_fetch NAME
FOLDER`): the worker never imports Ultralytics and torch. The file lands in the worker's own
folder first and is moved into place whole, so two jobs downloading it at once each see a whole
file or none; the next job, and the form, find it there.
"""

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

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
    raise WeightsDownloadFailed(
        f"Could not download the pretrained weights {weights.name}: {why}. Put {weights.name} "
        f"in {weights.folder} (or turn TRAINING_ALLOW_DOWNLOADS off to say so on the form), "
        "or train from scratch."
    )


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
