"""The evaluation job: under its lease (core.leases, reaped by beat when its worker died), the
version is written as a folder, `val` runs in the worker process that alone opens the weights
(evaluations.val_worker, started by training.weights_process.worker_run), and the figures are
written with the end, in one update: a failure leaves none behind."""

import json
import logging
import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from core.leases import (
    Lease,
    LeaseLost,
    LongJob,
    database_faults,
    lease_row,
    lease_take,
    lease_work,
)
from core.tasks import task_send
from datasets.models import Image
from evaluations.models import Evaluation, EvaluationState
from evaluations.services.data import evaluation_data_write
from training.services.models import model_local_path
from training.weights_process import LOG_TAIL_CHARS, worker_run

logger = logging.getLogger(__name__)

EVALUATION_TIMEOUT_SECONDS = 30 * 60
VAL_BATCH = 16


def _send(evaluation: Evaluation) -> None:
    task_send("evaluations.evaluation_run", evaluation.pk)


EVALUATION_JOB = LongJob(
    label="evaluation",
    model=Evaluation,
    queued=EvaluationState.QUEUED,
    running=EvaluationState.RUNNING,
    failed=EvaluationState.FAILED,
    send=_send,
    started_field="started_at",
    gave_up_note="Start it again.",
)


def evaluation_run_once(evaluation_id: int) -> None:
    """Run one evaluation (the evaluations.evaluation_run task). Idempotent: one already taken
    (or finished, or deleted) is left alone."""
    lease = lease_take(EVALUATION_JOB, evaluation_id, progress=1)
    if lease is None:
        return
    evaluation = lease_row(
        lease,
        lambda: (
            Evaluation.objects.select_related("model", "dataset_version__dataset")
            .filter(pk=evaluation_id)
            .first()
        ),
    )
    if evaluation is None:
        return
    try:
        # A dropped database connection runs it again in place, or requeues it at once.
        lease_work(lease, lambda: _evaluate(evaluation, lease))
    except LeaseLost:
        logger.warning("evaluation %s: attempt %s lost its lease", evaluation_id, lease.attempt)


def _evaluate(evaluation: Evaluation, lease: Lease) -> None:
    steps: list[str] = []

    def progress(percent: int, message: str) -> None:
        steps.append(message)
        lease.renew(progress=max(1, min(percent, 99)), log="\n".join(steps))

    def fail(error: str, log: str = "") -> None:
        lease.finish(EvaluationState.FAILED, error=error[:2000], log=log[-LOG_TAIL_CHARS:])

    base = Path(settings.TRAINING_DIR) / "evaluations"
    base.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"evaluation-{evaluation.pk}-", dir=base))
    try:
        model, version = evaluation.model, evaluation.dataset_version
        progress(2, f"Writing the {evaluation.split} images of {version}")
        data = evaluation_data_write(
            version=version,
            class_map=evaluation.class_map,
            split=evaluation.split,
            root=workdir / "data",
        )
        if not data.images:
            fail(f"{version} has no image to evaluate in its {evaluation.split} split.")
            return
        try:
            weights = model_local_path(model)
        except (OSError, ValueError) as e:
            fail(f"The model's weights could not be read from storage ({type(e).__name__}).")
            return
        staged = workdir / f"kestrel-model-{model.pk}.pt"
        staged.symlink_to(Path(weights).resolve())
        options = workdir / "options.json"
        options.write_text(
            json.dumps(
                {
                    "task": evaluation.task,
                    # Depth pairs no class (its class_map is empty): its names go unchecked.
                    "class_names": [pair["model"] for pair in evaluation.class_map]
                    if evaluation.class_map
                    else None,
                    "imgsz": evaluation.imgsz,
                    "batch": VAL_BATCH,
                    "name": model.name,
                }
            ),
            encoding="utf-8",
        )
        answer = worker_run(
            [str(staged), data.data, str(workdir / "runs"), str(options)],
            module="evaluations.val_worker",
            timeout=EVALUATION_TIMEOUT_SECONDS,
            on_progress=lambda percent, message: progress(5 + percent * 9 // 10, message),
        )
        log = "\n".join(steps) + "\n\n" + answer.log
        if answer.error or not answer.result:
            fail(f"The evaluation failed: {answer.error}", log)
            return
        result = answer.result
        lease.finish(
            EvaluationState.SUCCEEDED,
            progress=100,
            error="",
            log=(log + "\nDone.")[-LOG_TAIL_CHARS:],
            images=int(result.get("images") or 0),
            metrics=result.get("metrics") or {},
            val_args=result.get("val_args") or {},
            per_class=result.get("per_class") or [],
            confusion=result.get("confusion") or {},
            curves=result.get("curves") or [],
            worst_images=_worst_linked(evaluation, result.get("worst") or [], data.images),
        )
    except (LeaseLost, *database_faults()):
        raise
    except Exception as e:
        logger.exception("evaluations.evaluation_run %s failed", evaluation.pk)
        fail(f"The evaluation failed: {type(e).__name__}: {e}", "\n".join(steps))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _worst_linked(evaluation: Evaluation, worst: list[dict], files: dict[str, str]) -> list[dict]:
    """The worst images with the stored image each one is, and the dataset's image it is now
    (for the editor link; none when it was deleted since the version was saved)."""
    rows = [{**row, "sha256": files.get(str(row.get("file")), "")} for row in worst]
    shas = {row["sha256"] for row in rows if row["sha256"]}
    images: dict[str, int] = {}
    in_split: set[str] = set()
    found = (
        Image.objects.filter(
            dataset_id=evaluation.dataset_version.dataset_id, blob__sha256__in=shas
        )
        .order_by("id")
        .values_list("blob__sha256", "id", "split")
    )
    for sha, pk, split in found:
        # Copies of one file are images of their own: the first in the evaluated split wins.
        if sha in in_split:
            continue
        if split == evaluation.split:
            images[sha] = pk
            in_split.add(sha)
        else:
            images.setdefault(sha, pk)
    return [{**row, "image_id": images.get(row["sha256"])} for row in rows]
