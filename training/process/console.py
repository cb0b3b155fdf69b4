"""What the trainer says besides its training: its console, as `log` events a batch of lines at
a time, and samples of the machine (CPU, memory, disk, GPUs) as `system` events."""

import os
import sys
import threading
import time

from training.event_schema import MAX_LOG_LINES
from training.process.events import Events

LOG_FLUSH_SECONDS = 0.5


class LogTee:
    """Passes output through and sends complete lines as `log` events, a batch at a time.
    A carriage return (a progress bar redrawing) keeps only the line's last state."""

    def __init__(self, events: Events, original):
        self.events, self.original = events, original
        self._line = ""
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()

    def write(self, text: str) -> int:
        self.original.write(text)
        with self._lock:
            for part in text.splitlines(keepends=True):
                if part.endswith("\n"):
                    self._lines.append((self._line + part.rstrip("\r\n")).rsplit("\r", 1)[-1])
                    self._line = ""
                else:
                    self._line = (self._line + part).rsplit("\r", 1)[-1]
            due = time.monotonic() - self._last_flush > LOG_FLUSH_SECONDS
        if due or len(self._lines) > 200:
            self.flush()
        return len(text)

    def flush(self) -> None:
        self.original.flush()
        with self._lock:
            lines, self._lines = self._lines, []
            self._last_flush = time.monotonic()
        for start in range(0, len(lines), MAX_LOG_LINES):
            chunk = lines[start : start + MAX_LOG_LINES]
            self.events.emit("log", {"lines": [ln[:2000] for ln in chunk]})

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self.original, name)


def _system_sample(workdir: str, nvml) -> dict:
    import psutil

    memory = psutil.virtual_memory()
    sample = {
        "cpu_percent": psutil.cpu_percent(None),
        "ram_percent": memory.percent,
        "ram_used_gb": round(memory.used / 2**30, 2),
        "disk_percent": psutil.disk_usage(workdir).percent,
        "process_rss_gb": round(psutil.Process().memory_info().rss / 2**30, 2),
    }
    if nvml is not None:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "util_percent": util.gpu,
                    "memory_used_gb": round(mem.used / 2**30, 2),
                    "memory_total_gb": round(mem.total / 2**30, 2),
                    "temperature_c": nvml.nvmlDeviceGetTemperature(handle, 0),
                    "power_w": round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
                }
            )
        sample["gpus"] = gpus
    return sample


def _nvml():
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no driver, no GPU: CPU samples only
        return None


def _sampler(events: Events, workdir: str, interval: float, stop: threading.Event) -> None:
    nvml = _nvml()
    while not stop.wait(interval):
        try:
            events.emit("system", _system_sample(workdir, nvml))
        except Exception as e:  # noqa: BLE001
            sys.__stderr__.write(f"kestrel: system sample failed: {e}\n")
