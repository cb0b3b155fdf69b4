"""The process that opens user weights: exports a model to another format, or inspects an
uploaded checkpoint. Web and Celery processes never import torch or Ultralytics for this; they
start this module and read its answers.

    python -m training.weights_worker export <weights.pt> <format> <outdir>
    python -m training.weights_worker inspect <weights.pt> [<name>]
    python -m training.weights_worker serve

One JSON object per line on stdout: {"progress": 0-100, "message": ...} while it works, then
{"result": {...}} or {"error": "..."}. `serve` inspects one checkpoint per line it reads on
stdin ({"inspect": <path>, "name": <name>, "id": <id>}), answering each with one
{"id": <id>, "result": ...} or {"id": <id>, "error": ...} line, until stdin closes: a
supervisor inspects every checkpoint of its attempt without paying for the import of torch
each time. `name` is what an answer calls the file (a
stored file's own name is part of its storage key, which no answer shows). Everything else
anyone prints (Ultralytics, PNNX, OpenVINO, including what C code writes) goes to stderr, which
the caller keeps as the log. The caller sets the environment (Ultralytics offline, no
installs). Django is not imported here.
"""

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

from training.weights_check import (
    REFUSED_PREFIX,
    UnsafeWeights,
    checkpoint_loading_restrict,
    weights_check,
)

EXIT_FAILED = 1
EXIT_USAGE = 2


class Reporter:
    """Answers on the protocol stream, which nothing else writes to."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def send(self, **message: Any) -> None:
        self.stream.write(json.dumps(message) + "\n")
        self.stream.flush()

    def progress(self, percent: int, message: str) -> None:
        self.send(progress=percent, message=message)


def _protocol_stream() -> TextIO:
    """A private copy of stdout for the answers; fd 1 then points at stderr, so prints of
    Python and of native libraries land in the log."""
    stream = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)
    return stream


def _load(weights: Path, reporter: Reporter, name: str | None = None):
    """The YOLO model in `weights`, opened only through torch's restricted unpickler."""
    reporter.progress(5, "Checking what the weights file would run when loaded")
    checkpoint_loading_restrict()  # before Ultralytics is imported
    weights_check(weights, name=name)  # names what a refused file needs
    reporter.progress(15, "Loading the model")
    from ultralytics import YOLO

    return YOLO(str(weights))


def _names(model) -> list[str]:
    names = model.names
    if isinstance(names, dict):
        return [str(names[i]) for i in sorted(names)]
    return [str(n) for n in names]


def _imgsz(model) -> int | None:
    """The image size it was trained at, when the checkpoint says."""
    for source in (getattr(model, "ckpt", None) or {}).get("train_args") or {}, model.overrides:
        size = source.get("imgsz") if isinstance(source, dict) else None
        if isinstance(size, int) and size > 0:
            return size
        if isinstance(size, list | tuple) and size and isinstance(size[0], int):
            return max(size)
    return None


def _epoch(model) -> int | None:
    """The 1-based epoch a training checkpoint was saved at (None for final weights, which
    Ultralytics saves with epoch -1)."""
    epoch = (getattr(model, "ckpt", None) or {}).get("epoch")
    return (
        epoch + 1 if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else None
    )


def inspect(weights: Path, reporter: Reporter, name: str | None = None) -> dict:
    model = _load(weights, reporter, name)
    return {
        "task": model.task,
        "class_names": _names(model),
        "imgsz": _imgsz(model),
        "epoch": _epoch(model),
    }


def _failure(error: Exception, weights: Path | None = None, name: str | None = None) -> str:
    """One readable line for a failure; the file's own path never in it (a loader's message
    may quote it), only what the caller calls the file."""
    if isinstance(error, UnsafeWeights):
        text = f"{REFUSED_PREFIX}{error}."
    else:
        message = str(error).strip().splitlines()[0][:500] if str(error).strip() else ""
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    if weights is not None:
        shown = name or "the weights file"
        for form in {str(weights), str(weights.resolve()), weights.name}:
            text = text.replace(form, shown)
    return text


def _imports_warm() -> None:
    """What every inspection needs, imported now, the restricted loading first. A failure is
    left to the first inspection, which meets it again and answers it."""
    try:
        checkpoint_loading_restrict()
        from ultralytics import YOLO  # noqa: F401
    except Exception:  # noqa: BLE001, S110 - answered by the inspection that meets it again
        pass


class _Quiet(Reporter):
    """`serve` answers once per file: no progress lines between them."""

    def progress(self, percent: int, message: str) -> None:
        pass


def serve(reporter: Reporter, requests: TextIO) -> None:
    """Inspect each checkpoint a line of `requests` names, answering each in turn. Torch and
    Ultralytics are imported first, before the first line is read: the supervisor starts this
    as its trainer starts, so that its first checkpoint does not wait for the import (it did:
    a run's first checkpoint was stored 8 s after the trainer sent it on an idle machine, 20 s
    and more on a loaded one, while the trainer trained on)."""
    _imports_warm()
    quiet = _Quiet(reporter.stream)
    for line in requests:
        try:
            request = json.loads(line)
            weights, name = Path(request["inspect"]), str(request.get("name") or "")
            ident = request.get("id")
        except (ValueError, KeyError, TypeError, AttributeError):
            reporter.send(error='usage: one {"inspect": <path>, "name": <name>} per line')
            continue
        try:
            result = inspect(weights, quiet, name or None)
        except Exception as e:  # noqa: BLE001 - every failure becomes one readable answer
            reporter.send(id=ident, error=_failure(e, weights, name or None))
        else:
            reporter.send(id=ident, result=result)


def export(
    weights: Path, fmt: str, outdir: Path, imgsz: int, reporter: Reporter, data: str = ""
) -> dict:
    """Export next to a copy of the weights in `outdir` (Ultralytics writes beside its input).
    `data`: what the export's metadata says the model was trained on, in place of the
    training's data.yaml path on the server (Ultralytics writes "trained on <data>")."""
    outdir.mkdir(parents=True, exist_ok=True)
    source = outdir / weights.name
    if source.resolve() != weights.resolve():
        shutil.copyfile(weights, source)
    model = _load(source, reporter)
    if isinstance(getattr(model.model, "args", None), dict):
        model.model.args["data"] = data
    model.add_callback("on_export_start", lambda _: reporter.progress(30, f"Exporting to {fmt}"))
    reporter.progress(25, "Preparing the export")
    # ONNX with dynamic axes: the inference API's imgsz parameter applies to it too.
    extra = {"dynamic": True} if fmt == "onnx" else {}
    output = model.export(format=fmt, imgsz=imgsz, device="cpu", verbose=False, **extra)
    if not output:
        raise RuntimeError(f"Ultralytics returned no {fmt} file")
    output = Path(output)
    if not output.exists():
        raise RuntimeError(f"Ultralytics said it wrote {output.name}, but it is not there")
    source.unlink(missing_ok=True)
    reporter.progress(90, "Exported")
    return {"path": str(output), "task": model.task, "class_names": _names(model)}


def main(argv: list[str]) -> int:
    reporter = Reporter(_protocol_stream())
    weights = name = None
    try:
        if argv == ["serve"]:
            serve(reporter, sys.stdin)
            return 0
        if len(argv) >= 2 and argv[0] == "inspect":
            weights, name = Path(argv[1]), (argv[2] if len(argv) > 2 else None)
            result = inspect(weights, reporter, name)
        elif len(argv) >= 4 and argv[0] == "export":
            imgsz = int(argv[4]) if len(argv) > 4 else 640
            data = argv[5] if len(argv) > 5 else ""
            result = export(Path(argv[1]), argv[2], Path(argv[3]), imgsz, reporter, data)
        else:
            reporter.send(
                error="usage: export <weights> <format> <outdir> [imgsz [data]] | "
                "inspect <weights> [<name>] | serve"
            )
            return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - every failure becomes one readable answer
        reporter.send(error=_failure(e, weights, name))
        return EXIT_FAILED
    reporter.send(result=result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
