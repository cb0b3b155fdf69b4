"""What an external run's client sends, checked before anything of it is kept: the client's
slugs, whole numbers and metrics, its environment, and its system samples (kept in the shape of
Kestrel's own, event_schema.System, through the writer a supervised run's go through). Shared by
the run's start (training.services.external_runs.runs) and its events (.events)."""

import math
import re

from training.models import TrainingJob
from training.process.writer import stream_append, system_write


def slug(text: str) -> str:
    """The client's slugify (ultralytics.utils.callbacks.platform.slugify), which names the
    project and the run it sends; tests check the two agree."""
    text = re.sub(r"[^a-z0-9\s-]", "", str(text).lower()).replace(" ", "-")
    return re.sub(r"-+", "-", text).strip("-")[:128]


def _int(value, default: int | None, *, low: int = -(2**31), high: int = 2**31 - 1):
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return default
    return number if low <= number <= high else default


def _device_text(environment: dict, device: str) -> str:
    host = str(environment.get("hostname") or "own machine")
    what = environment.get("gpuType") or environment.get("cpu") or ""
    count = environment.get("gpuCount")
    if environment.get("gpuType") and isinstance(count, int) and count > 1:
        what = f"{count} × {what}"
    return f"{host}: {what} ({device})" if what else f"{host} ({device})"


def _client_info(data: dict) -> dict:
    environment = data.get("environment") if isinstance(data.get("environment"), dict) else {}
    train_args = data.get("trainArgs") if isinstance(data.get("trainArgs"), dict) else {}
    keep = {k: v for k, v in environment.items() if isinstance(v, str | int | float | bool)}
    return {
        "environment": {k[:60]: (v[:500] if isinstance(v, str) else v) for k, v in keep.items()},
        "train_args": {str(k)[:60]: str(v)[:500] for k, v in list(train_args.items())[:300]},
        "device": str(data.get("device") or "")[:100],
    }


# --- what the client reports as it goes ------------------------------------------------------


def _stream_add(job: TrainingJob, kind: str, seq: int, data: dict) -> None:
    """The event on the job's live stream too: an external run has no trainer writing one."""
    stream_append(job_id=job.pk, attempt=job.attempts, kind=kind, seq=seq, data=data)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if abs(value) < 1e15 else None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _metrics(raw: dict) -> dict[str, float]:
    """Named numbers only (the client sends a non-finite one as null), at most 500."""
    numbers = ((str(k)[:200], _number(v)) for k, v in list(raw.items())[:500])
    return {k: v for k, v in numbers if v is not None}


_GPU_MEMORY = re.compile(r",\s*(\d{1,9})MiB\s*$")


def _gpu_memory_gb(job: TrainingJob) -> float | None:
    """The GPU's memory from the client's environment (ultralytics' get_gpu_info: "NVIDIA
    H200, 143771MiB"); the client reports the first training GPU's, and GPUs of one run are
    one kind."""
    environment = (job.client_info or {}).get("environment") or {}
    match = _GPU_MEMORY.search(str(environment.get("gpuType") or ""))
    return round(int(match.group(1)) / 1024, 1) if match else None


def _system_keep(job: TrainingJob, attempt: int, system, *, seq: int) -> None:
    """The client's SystemLogger sample in the shape of Kestrel's (event_schema.System)."""
    if not isinstance(system, dict):
        return
    values: dict = {}
    for ours, theirs in (("cpu_percent", "cpu"), ("ram_percent", "ram")):
        if (number := _number(system.get(theirs))) is not None:
            values[ours] = number
    disks = system.get("disk")
    if isinstance(disks, list) and disks and isinstance(disks[0], dict):
        used, total = _number(disks[0].get("used_gb")), _number(disks[0].get("total_gb"))
        if used is not None and total:
            values["disk_percent"] = round(100 * used / total, 1)
    gpus = []
    raw_gpus = system.get("gpus") if isinstance(system.get("gpus"), dict) else {}
    total_gb = _gpu_memory_gb(job)
    for _, gpu in sorted(raw_gpus.items())[:64]:
        if not isinstance(gpu, dict):
            continue
        row = {
            ours: number
            for ours, theirs in (
                ("util_percent", "usage"),
                ("memory_percent", "memory"),
                ("temperature_c", "temp"),
                ("power_w", "power"),
            )
            if (number := _number(gpu.get(theirs))) is not None
        }
        # The client sends memory as a percentage; its environment names each GPU's size.
        if total_gb and "memory_percent" in row:
            row["memory_total_gb"] = total_gb
            row["memory_used_gb"] = round(total_gb * row["memory_percent"] / 100, 2)
        gpus.append(row)
    if gpus:
        values["gpus"] = gpus
    if not values:
        return
    system_write(job_id=job.pk, attempt=attempt, seq=seq, values=values)
    _stream_add(job, "system", seq, values)
