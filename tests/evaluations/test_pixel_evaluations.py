"""Evaluations of the per-pixel tasks: a tiny semantic and a tiny depth model (tests/pixel_data.py,
trained once per run) evaluated on a version of drawn pictures, whose figures are those
`YOLO(weights).val(...)` gives by hand on the same files, whose worst images are each scored as
val scores that image alone, and whose page shows the task's own figures and no empty section."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.test import Client

from core.errors import ServiceError
from evaluations.models import Evaluation, EvaluationState
from evaluations.selectors import LOWER_IS_BETTER
from evaluations.services.data import evaluation_data_write
from evaluations.services.run import VAL_BATCH, evaluation_run_once
from evaluations.services.submit import IGNORE, evaluation_submit
from evaluations.val_pixels import pixel_image_score, pixel_worst
from tests.evaluations.conftest import version_with
from tests.pixel_data import SEMANTIC_CLASSES, pixel_version_create, trained_weights
from tests.servers import ROOT
from tests.training.factories import trained_model_row


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _val_by_hand(weights: Path, datas: list[str], project: Path) -> list[dict]:
    """`YOLO(weights).val(...)` as a person would run it on each of `datas`, in a process of
    its own."""
    script = (
        "import json, sys\n"
        "from ultralytics import YOLO\n"
        "model = YOLO(sys.argv[1])\n"
        "for i, data in enumerate(sys.argv[4:]):\n"
        "    m = model.val(data=data, imgsz=64, batch=int(sys.argv[3]), project=sys.argv[2],"
        " name=f'by-hand-{i}', plots=False, verbose=False)\n"
        "    print('RESULT ' + json.dumps(m.results_dict))\n"
    )
    done = subprocess.run(  # noqa: S603 - our own script on our own files
        [sys.executable, "-c", script, str(weights), str(project), str(VAL_BATCH), *datas],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    return [json.loads(line.removeprefix("RESULT ")) for line in lines]


def _only(data_yaml: str, file: str, target: Path) -> str:
    """A copy of the folder of `data_yaml` holding only the image `file` (and its map)."""
    source = Path(data_yaml).parent
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        if path.is_file() and path.parent.name == "val" and path.stem != Path(file).stem:
            path.unlink()
    for cache in target.rglob("*.cache"):
        cache.unlink()
    return str(target / "data.yaml")


def _run(evaluation: Evaluation) -> Evaluation:
    evaluation_run_once(evaluation.pk)  # the task's body: its worker process is real
    evaluation.refresh_from_db()
    assert evaluation.state == EvaluationState.SUCCEEDED, evaluation.error + evaluation.log
    return evaluation


def _same_figures(stored: dict, by_hand: dict) -> None:
    assert set(stored) == set(by_hand) - {"fitness"}
    for key, value in stored.items():
        assert value == pytest.approx(by_hand[key], abs=1e-6), key


@pytest.mark.django_db(transaction=True)
@pytest.mark.same_on_any_database(
    "a pixel task's metrics against val by hand: an evaluation's rows are tested on both in "
    "tests/evaluations/test_evaluation.py"
)
def test_a_semantic_evaluation_matches_val_by_hand_and_ranks_images_by_their_own_iou(
    team, stranger, tmp_path
):
    weights = trained_weights("semantic")
    access = team.access("editor")
    version = pixel_version_create(access=access, task="semantic", train=2, val=3)
    model = trained_model_row(
        workspace=team.workspace,
        class_names=list(SEMANTIC_CLASSES),
        task="semantic",
        weights=weights.read_bytes(),
    )
    # The form pairs the classes by name, as for detect.
    editor = _client(team.editor)
    form = editor.get(f"/w/acme/models/{model.pk}/evaluate/?version={version.pk}").content
    assert b'data-testid="classes-by-name"' in form
    fields = {f"class_{i}": name for i, name in enumerate(SEMANTIC_CLASSES)}
    response = editor.post(
        f"/w/acme/models/{model.pk}/evaluate/",
        {"version": version.pk, "split": "val", "imgsz": "64", **fields},
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    evaluation = _run(Evaluation.objects.get(model=model))
    assert evaluation.images == 3

    # The same files, val by hand: the same figures; and each worst image, alone, scores what
    # its row says.
    data = evaluation_data_write(
        version=version, class_map=evaluation.class_map, split="val", root=tmp_path / "files"
    )
    assert "label_mapping" not in yaml.safe_load(Path(data.data).read_text())  # by name
    worst = evaluation.worst_images
    assert worst and [r["iou"] for r in worst] == sorted(r["iou"] for r in worst)
    alone = _only(data.data, worst[0]["file"], tmp_path / "alone")
    by_hand, worst_alone = _val_by_hand(weights, [data.data, alone], tmp_path / "runs")
    _same_figures(evaluation.metrics, by_hand)
    assert 0 < evaluation.metrics["metrics/mIoU"] < 1
    assert worst[0]["iou"] == pytest.approx(worst_alone["metrics/mIoU"], abs=1e-5)
    assert worst[0]["pixel_acc"] == pytest.approx(worst_alone["metrics/pixel_acc"], abs=1e-5)
    for row in worst:
        assert row["image_id"] and len(row["sha256"]) == 64 and row["pixels"] > 0
    # Per class: its IoU, in the classes of the truth; the pixel confusion matrix.
    assert [r["class"] for r in evaluation.per_class] == list(SEMANTIC_CLASSES)
    assert all(0 <= r["values"]["iou"] <= 1 and r["pixels"] > 0 for r in evaluation.per_class)
    assert evaluation.confusion["names"] == list(SEMANTIC_CLASSES)
    pixels = sum(map(sum, evaluation.confusion["matrix"]))
    assert pixels == sum(r["pixels"] for r in evaluation.per_class)
    assert evaluation.curves == []

    # The page: the task's figures, its per-class IoU, its matrix, its worst images linked to
    # the gallery filtered to them; no precision-recall section.
    page = _client(team.viewer).get(f"/w/acme/evaluations/{evaluation.pk}/").content.decode()
    for part in (
        "evaluation-shown",
        "evaluation-metrics",
        "evaluation-per-class",
        "evaluation-confusion",
        "evaluation-worst",
    ):
        assert f'data-testid="{part}"' in page, part
    assert 'data-key="metrics/mIoU"' in page and '<th scope="col" class="num">IoU</th>' in page
    assert 'data-testid="evaluation-curves"' not in page and "<polyline" not in page
    assert page.count('data-testid="worst-iou"') == len(worst)
    ds = version.dataset_id
    image = worst[0]["image_id"]
    assert f'href="/w/acme/datasets/{ds}/images/{image}/?evaluation={evaluation.pk}"' in page
    gallery = _client(team.viewer).get(f"/w/acme/datasets/{ds}/images/?evaluation={evaluation.pk}")
    shown = set(map(int, re.findall(r'data-image="(\d+)"', gallery.content.decode())))
    assert shown == {row["image_id"] for row in worst}
    assert _client(stranger).get(f"/w/acme/evaluations/{evaluation.pk}/").status_code == 404

    # Paired by hand, with "disc" ignored: its pixels are left out through Ultralytics' own
    # label_mapping, and val by hand on those files agrees.
    mapped = _run(
        evaluation_submit(
            access=access,
            model=model,
            version=version,
            class_map=["ground", "square", IGNORE],
            imgsz=64,
        )
    )
    files = evaluation_data_write(
        version=version, class_map=mapped.class_map, split="val", root=tmp_path / "mapped"
    )
    doc = yaml.safe_load(Path(files.data).read_text())
    assert doc["label_mapping"] == {0: 0, 1: 1, 2: 255}
    (by_hand_mapped,) = _val_by_hand(weights, [files.data], tmp_path / "runs-mapped")
    _same_figures(mapped.metrics, by_hand_mapped)
    assert [r["class"] for r in mapped.per_class] == ["ground", "square"]
    assert mapped.metrics["metrics/mIoU"] != evaluation.metrics["metrics/mIoU"]
    page = _client(team.viewer).get(f"/w/acme/evaluations/{mapped.pk}/").content.decode()
    assert 'data-testid="evaluation-left-out"' in page and "their pixels were ignored" in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.same_on_any_database(
    "a pixel task's metrics against val by hand: an evaluation's rows are tested on both in "
    "tests/evaluations/test_evaluation.py"
)
def test_a_depth_evaluation_matches_val_by_hand_and_ranks_images_by_their_own_error(team, tmp_path):
    weights = trained_weights("depth")
    access = team.access("editor")
    version = pixel_version_create(access=access, task="depth", train=2, val=3)
    model = trained_model_row(
        workspace=team.workspace, class_names=["depth"], task="depth", weights=weights.read_bytes()
    )
    # Nothing to pair: the form says so and posts no class.
    editor = _client(team.editor)
    form = editor.get(f"/w/acme/models/{model.pk}/evaluate/?version={version.pk}").content
    assert b'data-testid="classes-none"' in form and b'data-testid="class-pairs"' not in form
    response = editor.post(
        f"/w/acme/models/{model.pk}/evaluate/", {"version": version.pk, "split": "val"}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    evaluation = _run(Evaluation.objects.get(model=model))
    assert evaluation.class_map == [] and evaluation.images == 3

    data = evaluation_data_write(
        version=version, class_map=evaluation.class_map, split="val", root=tmp_path / "files"
    )
    assert yaml.safe_load(Path(data.data).read_text())["depth_scale"] == 1000
    worst = evaluation.worst_images
    assert len(worst) == 3
    assert [r["abs_rel"] for r in worst] == sorted((r["abs_rel"] for r in worst), reverse=True)
    alone = _only(data.data, worst[0]["file"], tmp_path / "alone")
    by_hand, worst_alone = _val_by_hand(weights, [data.data, alone], tmp_path / "runs")
    _same_figures(evaluation.metrics, by_hand)
    assert evaluation.metrics["metrics/abs_rel"] > 0 and 0 <= evaluation.metrics["metrics/delta1"]
    for key in ("abs_rel", "rmse", "delta1"):
        assert worst[0][key] == pytest.approx(worst_alone[f"metrics/{key}"], rel=1e-4), key
    assert all(row["image_id"] for row in worst)
    assert (evaluation.per_class, evaluation.confusion, evaluation.curves) == ([], {}, [])

    # The page: δ1 and the errors, the worst images; no per-class, matrix or curve section.
    page = _client(team.viewer).get(f"/w/acme/evaluations/{evaluation.pk}/").content.decode()
    for key in ("delta1", "abs_rel", "rmse", "silog"):
        assert f'data-key="metrics/{key}"' in page, key
    assert 'data-testid="evaluation-shown"' in page
    assert page.count('data-testid="worst-abs-rel"') == 3
    # No classes either: a depth version's one class ("depth") is not "left out".
    for part in (
        "evaluation-per-class",
        "evaluation-confusion",
        "evaluation-curves",
        "evaluation-classes",
    ):
        assert f'data-testid="{part}"' not in page, part
    # The list heads it with δ1, the depth figure Ultralytics ranks models by.
    listing = _client(team.viewer).get("/w/acme/evaluations/").content.decode()
    assert '<small class="muted">δ1 within 1.25×</small>' in listing
    # The comparison marks the lowest error as the best, and the highest δ1: beside a second
    # model that did worse on every figure, this one is best in each column.
    other = trained_model_row(workspace=team.workspace, class_names=["depth"], task="depth")
    worse = {
        key: value * 2 if key in LOWER_IS_BETTER else value / 2
        for key, value in evaluation.metrics.items()
    }
    Evaluation.objects.create(
        workspace=team.workspace,
        project_id=other.project_id,
        model=other,
        dataset_version=version,
        task="depth",
        imgsz=64,
        state=EvaluationState.SUCCEEDED,
        metrics=worse,
    )
    compare = _client(team.viewer).get(f"/w/acme/evaluations/compare/?version={version.pk}")
    rows = compare.content.decode().split('data-testid="compare-row"')[1:]
    best_row = next(row for row in rows if f'data-model="{model.pk}"' in row)
    assert best_row.count('data-testid="best"') == len(evaluation.metrics) == 6


@pytest.mark.django_db
def test_a_pixel_model_on_a_version_of_another_task_or_without_maps_is_refused(team):
    access = team.access("editor")
    depth = trained_model_row(workspace=team.workspace, class_names=["depth"], task="depth")
    street = version_with(access=access, classes=["person", "car"])
    with pytest.raises(ServiceError, match="is a depth model and Street is a detect dataset"):
        evaluation_submit(access=access, model=depth, version=street)
    page = _client(team.editor).get(f"/w/acme/models/{depth.pk}/evaluate/?version={street.pk}")
    assert "is a detect dataset" in page.content.decode()
    assert 'data-testid="evaluate-form"' not in page.content.decode()
    # A semantic version whose images have no mask has nothing to compare.
    semantic = trained_model_row(workspace=team.workspace, class_names=["road"], task="semantic")
    unmasked = version_with(access=access, classes=["road"], task="semantic", name="Roads")
    with pytest.raises(ServiceError, match="Roads v1 has no semantic mask to compare"):
        evaluation_submit(access=access, model=semantic, version=unmasked)
    # Maps in train only: its val split has nothing to compare, and the refusal names the split.
    val_bare = pixel_version_create(
        access=access, task="depth", train=3, val=0, unmasked=2, unmasked_split="val"
    )
    assert val_bare.summary["masks_per_split"] == {"train": 3}
    with pytest.raises(ServiceError, match="The val split of .* has no depth map .*\\(train\\)"):
        evaluation_submit(access=access, model=depth, version=val_bare)
    # Its classes still pair by name, as for detect.
    masked = pixel_version_create(access=access, task="semantic")
    with pytest.raises(ServiceError, match="“road” of the model has no class of the same name"):
        evaluation_submit(access=access, model=semantic, version=masked)
    assert not Evaluation.objects.exists()


def test_a_binary_image_with_nothing_to_find_and_nothing_found_is_not_among_the_worst():
    """A binary (one-class) model's IoU is its foreground's: an image without any, where the
    model finds none, is right, not an IoU of 0."""
    import torch
    from ultralytics.utils.metrics import SemanticMetrics

    metrics = SemanticMetrics(names={0: "crack"})
    nothing = torch.zeros((1, 8, 8), dtype=torch.int32)
    found = nothing.clone()
    found[0, :2, :2] = 1
    assert pixel_image_score(metrics, nothing, nothing) is None
    assert pixel_image_score(metrics, found, nothing)["iou"] == 0  # found what is not there
    assert pixel_image_score(metrics, found, found)["iou"] == 1
    scores = {"a.png": None, "b.png": pixel_image_score(metrics, found, nothing)}
    assert [row["file"] for row in pixel_worst(scores, "semantic", 20)] == ["b.png"]
