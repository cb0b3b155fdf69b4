"""A sweep that fine-tunes a model of the workspace (issue 27), as the training form's "A previous
Kestrel model" does: the form offers the workspace's usable models, every trial's job starts
from it with its family and size, and what a job would refuse is refused at submit (another
workspace's model as an unknown one, a model of another task, a searched model size)."""

import html
import re

import pytest

from sweeps.models import Sweep
from sweeps.services.advance import sweep_advance
from tests.sweeps.test_advance import trials_of
from tests.sweeps.test_views import _form, stranger_access
from tests.training.factories import small_version
from training.models import InspectState, TrainedModel, WeightsSource

pytestmark = pytest.mark.django_db


def _model(workspace, project, *, name="Base", task="detect", architecture="yolo11s", **fields):
    return TrainedModel.objects.create(
        workspace=workspace, project=project, name=name, task=task, architecture=architecture,
        imgsz=64, weights_key="k", **fields,
    )  # fmt: skip


def _errors(response) -> list[str]:
    """A field's errors, then the form's own (its reasons from the services)."""
    page = html.unescape(response.content.decode())
    found = re.findall(r'class="error"[^>]*>([^<]*)<', page)
    form = re.search(r'data-testid="form-errors">(.*?)</div>', page, re.S)
    return found + (re.findall(r"<p>([^<]*)</p>", form.group(1)) if form else [])


def test_a_sweep_fine_tunes_a_model_of_the_workspace(
    client, team, project, gpu_local, stranger, settings
):
    settings.TRAINING_ALLOW_DOWNLOADS = False
    version = small_version(access=team.access("owner"))
    base = _model(team.workspace, project)
    _model(team.workspace, project, name="Unchecked", inspect_state=InspectState.PENDING)
    theirs_access = stranger_access(stranger)
    theirs = _model(
        theirs_access.workspace,
        project=type(project).objects.create(workspace=theirs_access.workspace, name="P"),
        name="Theirs",
    )
    client.force_login(team.editor)
    url = f"/w/acme/projects/{project.pk}/sweeps/new/"
    page = client.get(url).content.decode()
    offered = re.findall(r'<option value="(\d+)"', page.split('name="base_model"')[1])
    assert offered == [str(base.pk)]  # loaded models of this workspace only
    fine_tune = {"weights": WeightsSource.MODEL, "n_trials": 2, "optimizers": []}

    answers = []
    for other in (theirs.pk, 999_999):
        refused = client.post(url, _form(version, gpu_local, **fine_tune, base_model=other))
        assert refused.status_code == 400
        answers.append(_errors(refused))
    assert answers[0] == answers[1] == ["Pick a model from the list."]
    refused = client.post(url, _form(version, gpu_local, **fine_tune, base_model=""))
    assert "Pick the model to fine-tune." in _errors(refused)
    sizes = client.post(
        url,
        _form(version, gpu_local, **fine_tune, base_model=base.pk, model_sizes=["n", "s"]),
    )
    assert any("keeps its model's size" in e for e in _errors(sizes))
    assert not Sweep.objects.exists()

    response = client.post(url, _form(version, gpu_local, **fine_tune, base_model=base.pk))
    assert response.status_code == 302, _errors(response)
    sweep = Sweep.objects.get()
    assert (sweep.base_model, sweep.model_family, sweep.model_size) == (base, "yolo11", "s")
    page = client.get(response["Location"]).content.decode()
    assert 'data-testid="sweep-base-model"' in page and "Base" in page
    sweep_advance(sweep.pk)
    for trial in trials_of(sweep):
        job = trial.job
        assert (job.weights, job.base_model, job.model_size) == ("model", base, "s")


def test_a_model_of_another_task_is_refused_at_submit(team, project, gpu_local):
    from core.errors import ServiceError
    from tests.sweeps.conftest import base_params, submit

    version = small_version(access=team.access("owner"))
    segment = _model(team.workspace, project, task="segment", architecture="yolo11n-seg")
    with pytest.raises(ServiceError, match="is a segment model; it cannot be fine-tuned"):
        submit(
            team, project, version, gpu_local,
            base=base_params(weights="model"), base_model=segment,
        )  # fmt: skip
    assert not Sweep.objects.exists()
