"""The remote trainer's side of training.remote: `python -m training.process.runner --remote
<job-url>` on a machine that has no database, no Redis and no shared disk, only HTTPS to Kestrel.

It reads its token from `KESTREL_TRAINER_TOKEN` (a SkyPilot secret) or its standard input
(what the command provider writes there), never the command line, which other users of a
machine can read; fetches the attempt's spec, the dataset version (a
zip, unpacked once into its folder) and any starting weights, and turns them into the spec the
trainer runs with. Checkpoints and the run's files go up through URLs Kestrel signs, each before
the event that names it. Every call is retried with back-off; none needs Django.

The folder is `--workdir` or `KESTREL_TRAINER_WORKDIR` (default: `kestrel-trainer` here).
`KESTREL_TRAINER_OFFLINE=1` keeps Ultralytics from downloading anything.
"""

import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from pathlib import Path

from training.run_files import RUN_NAME

TOKEN_ENV = "KESTREL_TRAINER_TOKEN"  # noqa: S105 - the name of a variable
WORKDIR_ENV = "KESTREL_TRAINER_WORKDIR"
OFFLINE_ENV = "KESTREL_TRAINER_OFFLINE"
TRIES = 6
CHUNK = 1 << 20


class RemoteError(Exception):
    """Kestrel refused (a 4xx that retrying cannot change) or stayed away through every try."""


class Kestrel:
    """Kestrel's trainer API for one job attempt, with the attempt's bearer token."""

    def __init__(self, job_url: str, token: str, *, timeout: float = 60, tries: int = TRIES):
        self.job_url, self.token = job_url.rstrip("/"), token
        self.timeout, self.tries = timeout, tries

    def _request(self, url: str, *, data=None, method="GET", headers=None, auth=True):
        headers = dict(headers or {})
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        return urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310

    def _retrying(self, call):
        """`call()`, tried again after a lost connection or a 5xx/429, with back-off."""
        for attempt in range(self.tries):
            try:
                return call()
            except urllib.error.HTTPError as e:
                if e.code < 500 and e.code != 429:
                    raise RemoteError(f"{e.code}: {_detail(e)}") from None
                error = f"{e.code}: {_detail(e)}"
            except (urllib.error.URLError, OSError) as e:
                error = str(e)
            sys.__stderr__.write(f"kestrel: {error}; trying again\n")
            time.sleep(min(2**attempt, 30))
        raise RemoteError(f"Kestrel did not answer after {self.tries} tries: {error}")

    def json(self, url: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        method = "GET" if body is None else "POST"
        headers = {"Content-Type": "application/json"} if body is not None else {}

        def call():
            request = self._request(url, data=data, method=method, headers=headers)
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                return json.loads(response.read())

        return self._retrying(call)

    def download(self, url: str, target: Path) -> Path:
        """The file at `url` as `target`, whole or not at all."""
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.{uuid.uuid4().hex}")

        def call():
            request = self._request(url)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                    with open(part, "wb") as out:
                        shutil.copyfileobj(response, out, CHUNK)
                os.replace(part, target)
            finally:
                part.unlink(missing_ok=True)
            return target

        return self._retrying(call)

    def upload(self, name: str, path: Path) -> None:
        """`path` stored in Kestrel as this attempt's file `name`, through a signed URL."""
        url = self.json(f"{self.job_url}/uploads", {"name": name})["url"]
        size = path.stat().st_size

        def call():
            with open(path, "rb") as f:
                request = self._request(
                    url,
                    data=f,
                    method="PUT",
                    auth=False,  # the signed URL is the key, as a presigned S3 URL is
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Length": str(size),
                    },
                )
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                    response.read()

        self._retrying(call)


def _detail(error: urllib.error.HTTPError) -> str:
    try:
        return json.loads(error.read()).get("detail", "")
    except Exception:  # noqa: BLE001 - only for the message
        return str(error)


def _unpack(archive: Path, root: Path) -> None:
    """Kestrel's dataset zip into `root`, whole or not at all; no entry leaves the folder."""
    tmp = root.with_name(f".{root.name}.{uuid.uuid4().hex}")
    try:
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                target = (tmp / info.filename).resolve()
                if not target.is_relative_to(tmp.resolve()) or info.is_dir():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, CHUNK)
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(root)
        except OSError:
            if not root.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _device() -> str:
    try:
        import torch

        count = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch CUDA: the CPU
        count = 0
    return ",".join(str(i) for i in range(count)) if count else "cpu"


def remote_prepare(job_url: str, token: str, workdir: Path) -> dict:
    """The spec a trainer runs with (training.process.runner.run), from what Kestrel serves."""
    from training.ultralytics_env import ultralytics_env

    kestrel = Kestrel(job_url, token)
    remote = kestrel.json(f"{kestrel.job_url}/spec")
    job_id, attempt = int(remote["job_id"]), int(remote["attempt"])
    job_dir = workdir / "jobs" / str(job_id)
    attempt_dir = job_dir / f"attempt-{attempt}"
    attempt_dir.mkdir(parents=True, exist_ok=True)
    subset = remote.get("subset")
    name = f"job-{job_id}" + (f"-subset{subset[0]}x{subset[1]}" if subset else "")
    root = workdir / "datasets" / name
    if not root.exists():
        archive = kestrel.download(remote["dataset_url"], workdir / "datasets" / f"{name}.zip")
        _unpack(archive, root)
        archive.unlink()
    model = remote.get("model")
    if remote.get("model_url"):
        model = str(kestrel.download(remote["model_url"], attempt_dir / "base.pt"))
    resume = None
    if remote.get("resume_url"):
        resume = str(kestrel.download(remote["resume_url"], attempt_dir / "resume.pt"))
    device = _device()
    train_args = {
        **remote["train_args"],
        "data": str(root / remote["dataset_entry"]),
        "project": str(job_dir),
        "name": RUN_NAME,
        "device": device,
    }
    if device == "cpu":
        train_args.update(amp=False, workers=0)
    return {
        "job_id": job_id,
        "attempt": attempt,
        "task": remote["task"],
        "model": model,
        "resume": resume,
        "train_args": train_args,
        "checkpoint_dir": str(attempt_dir / "checkpoints"),
        "workdir": str(workdir),
        "events_url": remote["events_url"],
        "events_token": token,
        "seq_from": int(remote.get("seq_from") or 0),  # a replaced machine numbers on
        "uploads": True,  # files go up through signed URLs before their events
        "job_url": kestrel.job_url,
        "system_sample_seconds": remote.get("system_sample_seconds", 5),
        "spool_drain_seconds": remote.get("spool_drain_seconds", 60),
        "lease_seconds": remote.get("lease_seconds", 60),
        "env": ultralytics_env(
            workdir / "ultralytics-config", offline=os.environ.get(OFFLINE_ENV) == "1"
        ),
    }


def remote_spec_from_argv(argv: list[str]) -> dict:
    """`--remote <job-url> [--workdir DIR]` → the spec to run. The token comes from
    KESTREL_TRAINER_TOKEN or, when that is not set, the first line of standard input (what a
    command such as ssh can pass without showing it)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m training.process.runner")
    parser.add_argument("--remote", required=True, metavar="JOB_URL")
    parser.add_argument("--workdir", default=os.environ.get(WORKDIR_ENV) or "kestrel-trainer")
    args = parser.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")  # not passed on to anything this process starts
    if not token and not sys.stdin.isatty():
        token = sys.stdin.readline().strip()
    if not token:
        raise SystemExit(f"{TOKEN_ENV} is not set, nor a token given on standard input")
    return remote_prepare(args.remote, token, Path(args.workdir).resolve())
