"""Training's data checks are the health check's rules (datasets.services.version_checks):
errors refuse a version whatever “Train anyway” says, warnings refuse it until it is ticked, and
the training form, the API and the health page say the same sentences about the same version."""

import html
import os
import re
import shutil
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from core.errors import ServiceError
from datasets.models import Blob, Label, Severity
from datasets.services.health import health_run
from datasets.services.health_checks import DataTally, Kind, data_findings
from datasets.services.version_checks import version_check
from datasets.services.versions import version_create
from tests.training.helpers import SHARED, single_class_copy, version_of
from training.models import JobState, TrainingJob
from training.services.arguments import TrainParams
from training.services.jobs import job_submit
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db

TICK = "Tick “Train anyway” to train on it as it is."


@pytest.fixture
def coco8(team):
    """coco8 as Ultralytics ships it, imported from ../shared/datasets: six of its train
    classes have no labels in val, and most of its 80 classes none at all."""
    return version_of(
        user=team.owner,
        workspace=team.workspace,
        folder=SHARED / "coco8",
        task="detect",
        name="coco8",
    )


def _form(version, gpu, **overrides) -> dict:
    return {
        "dataset_version": version.pk,
        "task": "",
        "model_family": "yolo11",
        "model_size": "n",
        "weights": "scratch",
        "epochs": 3,
        "imgsz": 64,
        "batch": "auto",
        "patience": 100,
        "optimizer": "auto",
        "seed": 0,
        "gpu_type": gpu.pk,
        "extra_args": "",
        "start": "1",
        **overrides,
    }


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _text(response) -> str:
    return html.unescape(response.content.decode())


def _findings(page: str) -> list[tuple[str, str, str]]:
    """(code, level, sentence) of each data check a page lists."""
    return re.findall(
        r'data-testid="version-finding" data-code="([^"]+)" data-level="([^"]+)">.*?'
        r'<span class="sentence">(.*?)</span>',
        page,
        re.S,
    )


def _params(**kw) -> TrainParams:
    base = dict(
        task="detect",
        model_family="yolo11",
        model_size="n",
        weights="scratch",
        epochs=3,
        imgsz=64,
        batch=2,
        patience=100,
        optimizer="auto",
        seed=0,
        extra_args={},
    )
    return TrainParams(**{**base, **kw})


def _submit(team, project, version, gpu, **kw) -> TrainingJob:
    return job_submit(
        access=team.access("editor"),
        project=project,
        version=version,
        gpu_type_id=gpu.pk,
        params=_params(),
        **kw,
    )


# --- coco8 trains once told to --------------------------------------------------------------


def test_coco8_has_no_error_and_its_warnings_name_what_val_lacks(coco8):
    check = version_check(coco8)
    assert check.errors == []
    codes = [f.code for f in check.warnings]
    assert codes == [Kind.CLASS_NOT_IN_VAL, Kind.CLASS_EMPTY]
    missing = check.finding(Kind.CLASS_NOT_IN_VAL).sentence
    assert missing.startswith("6 classes have no labels in val: “zebra”, “giraffe”, “bowl”")
    assert "cannot be measured" in missing and "move some of their images to val" in missing
    assert (check.train_images, check.val_images) == (4, 4)


def test_the_form_lists_coco8s_warnings_as_notes_and_starts_it(
    client, team, project, coco8, gpu_local
):
    """Warnings inform, errors block (issue 33): the form says so before the click, and its
    start button trains a version whose findings are all warnings."""
    client.force_login(team.editor)
    form = _text(client.get(_url("job_create", pk=project.pk), {"version": coco8.pk}))
    notes = re.search(r'data-testid="checks-notes">(.*?)</div>', form, re.S).group(1)
    assert "training goes ahead" in notes
    assert "6 classes have no labels in val: “zebra”" in notes
    assert 'data-testid="checks-blocking"' not in form and "Train anyway" not in form

    response = client.post(_url("job_create", pk=project.pk), _form(coco8, gpu_local))
    job = TrainingJob.objects.get()
    assert response.status_code == 302 and response.url == _url("job_detail", pk=job.pk)
    assert job.state == JobState.QUEUED and job.dataset_version == coco8


def test_the_service_refuses_coco8_without_train_anyway(team, project, coco8, gpu_local):
    with pytest.raises(ServiceError, match="has 2 warnings: 6 classes have no labels in val"):
        _submit(team, project, coco8, gpu_local)
    with pytest.raises(ServiceError, match="Train anyway"):
        _submit(team, project, coco8, gpu_local, quick_test=True)
    assert not TrainingJob.objects.exists()
    assert _submit(team, project, coco8, gpu_local, train_anyway=True).state == JobState.QUEUED


def test_the_api_takes_train_anyway(team, project, coco8, gpu_local):
    _, raw = api_key_create(access=team.access("owner"), name="ci", scopes=["read", "train"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    body = {
        "project_id": project.pk,
        "dataset_version_id": coco8.pk,
        "gpu_type_id": gpu_local.pk,
        "model_family": "yolo11",
        "weights": "scratch",
        "epochs": 3,
        "imgsz": 64,
        "batch": 2,
    }
    refused = api.post("/api/v1/training/jobs", body, content_type="application/json")
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert "6 classes have no labels in val" in detail and TICK in detail
    assert not TrainingJob.objects.exists()
    body["train_anyway"] = True
    created = api.post("/api/v1/training/jobs", body, content_type="application/json")
    assert created.status_code == 201, created.content
    assert created.json()["state"] == JobState.QUEUED


# --- errors refuse whatever the box says ----------------------------------------------------


def test_a_version_with_no_labels_is_refused_even_with_train_anyway(
    client, team, project, coco8, gpu_local
):
    Label.objects.filter(image__dataset=coco8.dataset).delete()
    empty = version_create(access=team.access("editor"), dataset=coco8.dataset)
    check = version_check(empty)
    assert [(f.level, f.code) for f in check.errors] == [(Severity.ERROR, Kind.NO_LABELS)]

    client.force_login(team.editor)
    form = _text(client.get(_url("job_create", pk=project.pk), {"version": empty.pk}))
    blocking = re.search(r'data-testid="checks-blocking">(.*?)</div>', form, re.S).group(1)
    assert "Blocks training" in blocking and "No labels at all" in blocking
    response = client.post(
        _url("job_create", pk=project.pk), _form(empty, gpu_local, train_anyway="1")
    )
    assert response.status_code == 400
    assert "coco8 v2 cannot be trained: No labels at all" in _text(response)
    assert not TrainingJob.objects.exists()


def _start_actions(page: str) -> str:
    return re.search(r'<div class="form-actions" id="start-actions".*?</div>', page, re.S).group(0)


def test_the_start_buttons_follow_the_version_picked_and_say_why_they_are_off(
    client, team, project, coco8, gpu_local
):
    Label.objects.filter(image__dataset=coco8.dataset).delete()
    empty = version_create(access=team.access("editor"), dataset=coco8.dataset)  # the newest
    client.force_login(team.editor)
    url = _url("job_create", pk=project.pk)
    # The form opens on the newest version, which has an error: no button starts it.
    actions = _start_actions(_text(client.get(url)))
    assert re.search(
        r'data-testid="start-training" disabled aria-describedby="start-blocked"', actions
    )
    assert re.search(r'data-testid="quick-test" disabled', actions)
    blocked = re.search(r'data-testid="start-blocked">(.*?)</small>', actions, re.S).group(1)
    assert blocked.startswith(
        "coco8 v2 cannot be trained: it has an error, listed under Data checks."
    )

    # Picking another version (the data checks' hx-get) brings the buttons back with the checks.
    htmx = {"HX-Request": "true", "HX-Target": "data-checks"}
    picked = _text(client.get(url, {"dataset_version": coco8.pk, "task": ""}, headers=htmx))
    assert 'id="data-checks"' in picked and 'hx-select-oob="#start-actions"' in picked
    actions = _start_actions(picked)
    assert "disabled" not in actions and "start-blocked" not in actions
    assert 'data-testid="start-training">Start training</button>' in actions
    picked = _text(client.get(url, {"dataset_version": empty.pk, "task": ""}, headers=htmx))
    assert 'data-testid="start-training" disabled' in _start_actions(picked)

    # The server still refuses the version whatever the button said.
    response = client.post(url, _form(empty, gpu_local))
    assert response.status_code == 400 and "coco8 v2 cannot be trained" in _text(response)
    assert not TrainingJob.objects.exists()


def test_a_version_with_no_train_image_is_refused_even_with_train_anyway(
    team, project, gpu_local, tmp_path
):
    folder = single_class_copy(SHARED / "coco8", tmp_path / "c")
    for kind in ("images", "labels"):
        for path in (folder / kind / "train").iterdir():
            shutil.move(path, folder / kind / "val" / path.name)
    version = version_of(
        user=team.owner, workspace=team.workspace, folder=folder, task="detect", name="alltrain"
    )
    with pytest.raises(ServiceError, match="No image is in the train split"):
        _submit(team, project, version, gpu_local, train_anyway=True)
    assert not TrainingJob.objects.exists()


def test_a_file_the_health_check_cannot_decode_refuses_its_versions(
    team, project, gpu_local, tmp_path
):
    folder = single_class_copy(SHARED / "coco8", tmp_path / "c")
    version = version_of(
        user=team.owner, workspace=team.workspace, folder=folder, task="detect", name="broken"
    )
    assert version_check(version).findings == []
    blob = Blob.objects.filter(images__dataset=version.dataset, images__split="train").first()
    Path(os.environ["MEDIA_ROOT"], blob.storage_key).unlink()
    health_run(dataset=version.dataset)

    broken = version_check(version).finding(Kind.UNREADABLE)
    assert broken.level == Severity.ERROR
    assert broken.sentence.startswith("1 image cannot be decoded (missing, truncated or corrupt)")
    with pytest.raises(ServiceError, match="cannot be trained: 1 image cannot be decoded"):
        _submit(team, project, version, gpu_local, train_anyway=True)


# --- one rule set, the same words on both pages ---------------------------------------------


def test_the_health_page_and_the_form_say_the_same_about_a_version(client, team, project, coco8):
    Label.objects.filter(image__dataset=coco8.dataset).delete()
    empty = version_create(access=team.access("editor"), dataset=coco8.dataset)
    client.force_login(team.editor)
    for version in (coco8, empty):
        health = _text(
            client.get(_url("dataset_health", pk=coco8.dataset_id), {"version": version.number})
        )
        form = _text(client.get(_url("job_create", pk=project.pk), {"version": version.pk}))
        on_health, on_form = _findings(health), _findings(form)
        assert on_health and on_health == on_form
        assert f"Training checks of coco8 v{version.number}" in health
        assert f"Data checks of coco8 v{version.number}" in form
    assert ("class_not_in_val", "warning") == _findings(
        _text(client.get(_url("dataset_health", pk=coco8.dataset_id), {"version": 1}))
    )[0][:2]
    assert ("no_labels", "error") == on_health[0][:2]


def test_the_health_check_of_the_dataset_finds_what_training_finds(coco8):
    # The dataset as it is now is coco8 v1: its stored findings on splits and classes carry
    # the same levels and sentences as the version's data checks.
    stored = {(f.kind, f.severity, f.message) for f in health_run(dataset=coco8.dataset)}
    checked = {(f.code, f.level, f.sentence) for f in version_check(coco8).findings}
    assert checked <= stored
    assert not [s for s in stored if s[1] == Severity.ERROR]  # “0 errors”, and it trains


def test_a_tiny_val_split_is_a_warning():
    def findings(train: int, val: int) -> dict:
        tally = DataTally(task="detect", classes=[(0, "thing")])
        for i in range(train + val):
            tally.image(i, "train" if i < train else "val")
            tally.label(i, 0, "box")
        return {f.code: f for f in data_findings(tally)}

    tiny = findings(100, 3)[Kind.TINY_VAL]
    assert tiny.level == Severity.WARNING
    assert tiny.sentence.startswith("The val split is tiny: 3 images against 100 in train (2.9%)")
    assert Kind.TINY_VAL not in findings(100, 10)
    assert findings(100, 0)[Kind.NO_VAL].level == Severity.ERROR
