"""Evaluations end to end: two real models evaluated by a real Celery worker on a version made
from coco8, whose figures are those `YOLO(weights).val(...)` gives by hand on the same files;
the pages; a failure that leaves no figures behind."""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.test import Client

from evaluations.models import Evaluation, EvaluationState
from evaluations.services.data import evaluation_data_write
from evaluations.services.run import VAL_BATCH, evaluation_run_once
from evaluations.services.submit import evaluation_submit
from tests.evaluations.conftest import version_with
from tests.servers import ROOT
from tests.training.factories import trained_model_row
from tests.training.helpers import SHARED, version_of


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _wait(evaluation: Evaluation, timeout: float = 240) -> Evaluation:
    deadline = time.monotonic() + timeout
    while not evaluation.is_final:
        assert time.monotonic() < deadline, f"still {evaluation.state}: {evaluation.log[-2000:]}"
        time.sleep(0.5)
        evaluation.refresh_from_db()
    return evaluation


def _names(weights: Path) -> list[str]:
    from ultralytics import YOLO

    names = YOLO(str(weights)).names
    return [names[i] for i in sorted(names)]


def _coco8_with_found_persons(weights: Path, target: Path) -> Path:
    """coco8, where each val image also has, as persons, the first boxes the model finds there:
    the model finds some of what is labelled, misses the rest and finds more that is not, so
    every figure is something between 0 and 1."""
    from ultralytics import YOLO

    shutil.copytree(SHARED / "coco8" / "images", target / "images")
    shutil.copytree(SHARED / "coco8" / "labels", target / "labels")
    text = (SHARED / "coco8" / "coco8.yaml").read_text()
    (target / "data.yaml").write_text(text.replace("path: ", "# path: ", 1))
    model = YOLO(str(weights))
    for image in sorted((target / "images" / "val").iterdir()):
        boxes = model.predict(str(image), imgsz=64, conf=0.25, verbose=False)[0].boxes
        lines = [" ".join(["0", *(f"{v:.6f}" for v in box)]) for box in boxes.xywhn[:8].tolist()]
        label = target / "labels" / "val" / f"{image.stem}.txt"
        label.write_text(label.read_text() + "".join(f"{line}\n" for line in lines))
    return target


def _val_by_hand(weights: Path, data: str, project: Path) -> dict:
    """`YOLO(weights).val(...)` as a person would run it, in a process of its own."""
    script = (
        "import json, sys\n"
        "from ultralytics import YOLO\n"
        "m = YOLO(sys.argv[1]).val(data=sys.argv[2], imgsz=64, batch=int(sys.argv[4]),"
        " project=sys.argv[3], name='by-hand', plots=False, verbose=False)\n"
        "print('RESULT ' + json.dumps(m.results_dict))\n"
    )
    done = subprocess.run(  # noqa: S603 - our own script on our own files
        [sys.executable, "-c", script, str(weights), data, str(project), str(VAL_BATCH)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


@pytest.mark.django_db(transaction=True)
def test_two_models_evaluated_by_the_worker_match_val_by_hand_and_compare(
    team, stranger, evaluation_weights, celery_worker_process, tmp_path
):
    boxy, trained = evaluation_weights["boxy"], evaluation_weights["trained"]
    names = _names(boxy)
    folder = _coco8_with_found_persons(boxy, tmp_path / "coco8")
    version = version_of(
        user=team.owner, workspace=team.workspace, folder=folder, task="detect", name="coco8"
    )
    models = {
        "boxy": trained_model_row(
            workspace=team.workspace, class_names=names, weights=boxy.read_bytes()
        ),
        "trained": trained_model_row(
            workspace=team.workspace, class_names=names, weights=trained.read_bytes()
        ),
    }
    editor = _client(team.editor)
    for model in models.values():
        # The classes match by name: the form posts them as they are.
        page = editor.get(f"/w/acme/models/{model.pk}/evaluate/?version={version.pk}")
        assert 'data-testid="classes-by-name"' in page.content.decode()
        fields = {f"class_{i}": name for i, name in enumerate(names)}
        response = editor.post(
            f"/w/acme/models/{model.pk}/evaluate/",
            {"version": version.pk, "split": "val", "imgsz": "64", **fields},
        )
        assert response.status_code == 302, response.content.decode()[:3000]
    evaluations = {key: _wait(Evaluation.objects.get(model=model)) for key, model in models.items()}
    for evaluation in evaluations.values():
        assert evaluation.state == EvaluationState.SUCCEEDED, evaluation.error + evaluation.log
        assert (evaluation.images, evaluation.progress) == (4, 100)

    # The same files, val by hand: the same figures.
    best = evaluations["boxy"]
    data = evaluation_data_write(
        version=version, class_map=best.class_map, split="val", root=tmp_path / "files"
    )
    by_hand = _val_by_hand(boxy, data.data, tmp_path / "runs")
    assert set(best.metrics) == set(by_hand) - {"fitness"}
    for key, value in best.metrics.items():
        assert value == pytest.approx(by_hand[key], abs=1e-6), key
    assert 0 < best.metrics["metrics/mAP50(B)"] < 1
    assert 0 < best.metrics["metrics/recall(B)"] < 1
    assert best.val_args["conf"] == 0.001 and best.val_args["batch"] == VAL_BATCH

    # Its figures: per class, the confusion matrix (80 classes and background), the curve.
    person = next(row for row in best.per_class if row["class"] == "person")
    assert person["instances"] > 10 and 0 < person["values"]["metrics/mAP50(B)"] <= 1
    assert len(best.confusion["names"]) == len(names) + 1 == len(best.confusion["matrix"])
    assert best.confusion["matrix"][0][0] > 0  # persons found as persons
    assert best.curves and best.curves[0]["name"] == "Precision-Recall(B)"
    assert len(best.curves[0]["recall"]) == len(best.curves[0]["mean"]) == 101
    # The worst images: errors counted at IoU 0.5, each linked to its image in the dataset.
    assert best.worst_images
    for row in best.worst_images:
        assert row["fp"] + row["fn"] > 0 and row["tp"] <= row["labels"]
        assert row["image_id"] and len(row["sha256"]) == 64
    errors = [r["fp"] + r["fn"] for r in best.worst_images]
    assert errors == sorted(errors, reverse=True)
    nothing_found = evaluations["trained"]
    assert nothing_found.metrics["metrics/mAP50(B)"] < best.metrics["metrics/mAP50(B)"]

    # The pages: a member sees them, a stranger does not.
    viewer = _client(team.viewer)
    page = viewer.get(f"/w/acme/evaluations/{best.pk}/").content.decode()
    for part in ("evaluation-metrics", "evaluation-per-class", "evaluation-confusion"):
        assert f'data-testid="{part}"' in page
    assert "<polyline" in page
    image = best.worst_images[0]["image_id"]
    ds = version.dataset_id
    # Each opens in the gallery filtered to the evaluation's worst images, which shows those.
    assert f'href="/w/acme/datasets/{ds}/images/{image}/?evaluation={best.pk}"' in page
    gallery = viewer.get(f"/w/acme/datasets/{ds}/images/?evaluation={best.pk}").content.decode()
    shown = set(map(int, re.findall(r'data-image="(\d+)"', gallery)))
    assert shown == {row["image_id"] for row in best.worst_images}
    listing = viewer.get("/w/acme/evaluations/").content.decode()
    assert listing.count('data-testid="evaluation-row"') == 2
    compare = viewer.get(f"/w/acme/evaluations/compare/?version={version.pk}").content.decode()
    assert compare.count('data-testid="compare-row"') == 2
    assert f'data-model="{models["boxy"].pk}"' in compare
    assert 'data-testid="best"' in compare
    outsider = _client(stranger)
    for url in (
        f"/w/acme/evaluations/{best.pk}/",
        "/w/acme/evaluations/",
        f"/w/acme/evaluations/compare/?version={version.pk}",
    ):
        assert outsider.get(url).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_weights_that_cannot_be_loaded_fail_with_a_reason_and_no_figures(team):
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])  # not a .pt
    version = version_with(access=team.access("editor"), classes=["bird"])
    evaluation = evaluation_submit(access=team.access("editor"), model=model, version=version)
    evaluation_run_once(evaluation.pk)  # the task's body, here: its worker process is real
    evaluation.refresh_from_db()
    assert evaluation.state == EvaluationState.FAILED
    assert evaluation.error.startswith("The evaluation failed: ")
    assert "weights" in evaluation.error.lower() or "zip" in evaluation.error.lower()
    assert (evaluation.metrics, evaluation.per_class, evaluation.worst_images) == ({}, [], [])
    assert evaluation.confusion == {} and evaluation.curves == [] and evaluation.images == 0
    page = _client(team.viewer).get(f"/w/acme/evaluations/{evaluation.pk}/").content.decode()
    assert (
        'data-testid="evaluation-error"' in page and 'data-testid="evaluation-metrics"' not in page
    )
