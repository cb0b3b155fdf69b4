"""The workspace's Models page, the try-it page and deleting a model, as people use them."""

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotation.models import PrelabelRun
from core.errors import ServiceError
from deploy.models import Deployment, ModelExport
from deploy.services import model_delete
from tests.datasets.factories import DatasetFactory
from tests.training.factories import (
    finished_job,
    job_row,
    local_gpu,
    small_version,
    trained_model_row,
)
from tests.workspaces.factories import ProjectFactory
from training.models import JobState, TrainedModel
from workspaces.models import Membership

pytestmark = pytest.mark.django_db


def _list_url(**query) -> str:
    url = reverse("model_list", kwargs={"ws_slug": "acme"})
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def _rows(response) -> list[str]:
    """The model names in the table's order."""
    return [m.name for m in response.context["page"].object_list]


def _model(workspace, name: str, task: str = "detect", metrics=None, project=None, size=10):
    model = trained_model_row(workspace=workspace, class_names=["bird", "cat"], task=task)
    model.name = name
    model.metrics = metrics or {}
    model.weights_size = size
    fields = ["name", "metrics", "weights_size"]
    if project is not None:
        model.project = project
        fields.append("project")
    model.save(update_fields=fields)
    return model


@pytest.fixture
def trained(team):
    """A model from a finished run (with its job and dataset version) in project Birds."""
    project = ProjectFactory(workspace=team.workspace, name="Birds")
    version = small_version(access=team.access("owner"))
    job = finished_job(project=project, version=version, gpu=local_gpu(), user=team.owner)
    return job.model


# --- the list -------------------------------------------------------------------------------


def test_owner_sees_every_model_with_where_it_came_from(client, team, trained):
    uploaded = _model(team.workspace, "Uploaded herons", task="segment", size=5 * 1024**2)
    client.force_login(team.owner)
    response = client.get(_list_url())
    assert response.status_code == 200
    html = response.content.decode()
    assert _rows(response) == ["Uploaded herons", trained.name]  # newest first
    assert "Finished run" in html  # the run
    assert f"{trained.dataset_version.dataset.name} v1" in html  # the dataset version
    assert "0.500" in html and "mAP50-95" in html  # the model's main metric
    assert "5.0\xa0MB" in html  # size
    assert "bird" in html  # classes
    for name in ("model_try", "model_weights", "model_delete"):
        assert reverse(name, kwargs={"ws_slug": "acme", "pk": uploaded.pk}) in html
    assert f"{reverse('deployment_list', kwargs={'ws_slug': 'acme'})}?model={uploaded.pk}" in html


def test_viewer_sees_the_models_but_no_buttons_to_try_or_delete(client, team, trained):
    client.force_login(team.viewer)
    response = client.get(_list_url())
    assert response.status_code == 200
    html = response.content.decode()
    assert trained.name in html
    assert reverse("model_weights", kwargs={"ws_slug": "acme", "pk": trained.pk}) in html
    assert reverse("model_try", kwargs={"ws_slug": "acme", "pk": trained.pk}) not in html
    assert reverse("model_delete", kwargs={"ws_slug": "acme", "pk": trained.pk}) not in html


def test_a_stranger_gets_404_and_never_sees_the_models(client, trained, stranger):
    client.force_login(stranger)
    for url in (
        _list_url(),
        reverse("model_try", kwargs={"ws_slug": "acme", "pk": trained.pk}),
        reverse("model_delete", kwargs={"ws_slug": "acme", "pk": trained.pk}),
    ):
        response = client.get(url)
        assert response.status_code == 404
        assert trained.name.encode() not in response.content
    response = client.post(reverse("model_delete", kwargs={"ws_slug": "acme", "pk": trained.pk}))
    assert response.status_code == 404
    assert TrainedModel.objects.filter(pk=trained.pk).exists()


def test_a_model_of_another_workspace_is_404_under_this_one(client, team, stranger):
    theirs = trained_model_row(
        workspace=Membership.objects.get(user=stranger).workspace, class_names=["x"]
    )
    client.force_login(team.owner)
    for name in ("model_try", "model_delete"):
        assert (
            client.get(reverse(name, kwargs={"ws_slug": "acme", "pk": theirs.pk})).status_code
            == 404
        )


def test_filters_by_project_and_task(client, team):
    birds = ProjectFactory(workspace=team.workspace, name="Birds")
    cars = ProjectFactory(workspace=team.workspace, name="Cars")
    _model(team.workspace, "bird boxes", project=birds)
    _model(team.workspace, "bird masks", task="segment", project=birds)
    _model(team.workspace, "car boxes", project=cars)
    client.force_login(team.editor)
    assert sorted(_rows(client.get(_list_url(project=birds.pk)))) == ["bird boxes", "bird masks"]
    assert sorted(_rows(client.get(_list_url(task="detect")))) == ["bird boxes", "car boxes"]
    assert _rows(client.get(_list_url(project=birds.pk, task="segment"))) == ["bird masks"]
    response = client.get(_list_url(project=cars.pk, task="pose"))
    assert _rows(response) == [] and b"No models match these filters." in response.content
    # Unknown values are ignored rather than failing.
    assert len(_rows(client.get(_list_url(project="nope", task="dance")))) == 3


def test_sorts_by_main_metric_of_each_task(client, team):
    _model(team.workspace, "middling", metrics={"metrics/mAP50-95(B)": 0.4})
    _model(team.workspace, "untrained")  # no metric: last both ways
    _model(team.workspace, "masks", task="segment", metrics={"metrics/mAP50-95(M)": 0.7})
    _model(team.workspace, "top-1", task="classify", metrics={"metrics/accuracy_top1": 0.9})
    _model(team.workspace, "weak", metrics={"metrics/mAP50-95(B)": 0.1, "metrics/mAP50(B)": 0.95})
    client.force_login(team.owner)
    best_first = _rows(client.get(_list_url(sort="metric")))
    assert best_first == ["top-1", "masks", "middling", "weak", "untrained"]
    worst_first = _rows(client.get(_list_url(sort="metric", dir="asc")))
    assert worst_first == ["weak", "middling", "masks", "top-1", "untrained"]
    assert _rows(client.get(_list_url(sort="created", dir="asc")))[0] == "middling"
    assert _rows(client.get(_list_url(sort="size", dir="desc", task="segment"))) == ["masks"]


def test_sort_links_keep_the_filters(client, team):
    project = ProjectFactory(workspace=team.workspace, name="Birds")
    _model(team.workspace, "one", project=project)
    client.force_login(team.owner)
    html = client.get(_list_url(project=project.pk, task="detect")).content.decode()
    assert f"?project={project.pk}&amp;task=detect&amp;sort=metric&amp;dir=desc" in html


def test_list_queries_do_not_grow_with_models(client, team, trained, django_assert_num_queries):
    client.force_login(team.owner)
    with CaptureQueriesContext(connection) as few:
        assert client.get(_list_url()).status_code == 200
    for i in range(6):
        project = ProjectFactory(workspace=team.workspace)
        model = _model(team.workspace, f"more {i}", project=project)
        Deployment.objects.create(workspace=team.workspace, model=model, slug=f"more-{i}", name="d")
    # session, user, workspace access (2), projects, count, page: 7 whatever the size.
    with django_assert_num_queries(len(few.captured_queries)):
        response = client.get(_list_url())
    assert len(_rows(response)) == 7
    assert response.content.decode().count('data-testid="deployed-badge"') == 6
    assert len(few.captured_queries) <= 8


# --- the try-it page ------------------------------------------------------------------------


def test_try_page_gives_the_real_url_and_snippets(client, team, trained, settings):
    settings.ALLOWED_HOSTS = ["kestrel.example.com"]
    client.force_login(team.editor)
    url = reverse("model_try", kwargs={"ws_slug": "acme", "pk": trained.pk})
    response = client.get(url, HTTP_HOST="kestrel.example.com", secure=True)
    assert response.status_code == 200
    html = response.content.decode()
    predict = f"https://kestrel.example.com/api/v1/models/{trained.pk}/predict"
    curl = response.context["snippets"]["curl"]
    assert curl.startswith(f"curl -X POST {predict}")
    assert '-H "Authorization: Bearer $KESTREL_API_KEY"' in curl
    assert "-F file=@image.jpg" in curl and "-F conf=0.25" in curl
    python = response.context["snippets"]["python"]
    assert f'"{predict}"' in python and "requests.post(" in python
    compile(python, "snippet.py", "exec")  # what people paste must at least parse
    # The page shows them (escaped as HTML) and posts to the same path with the session.
    assert "Bearer $KESTREL_API_KEY" in html and predict in html
    assert f'data-predict-url="/api/v1/models/{trained.pk}/predict"' in html
    assert 'data-csrf="' in html
    assert "js/try_model.js" in html
    # An editor cannot make keys: the page says who can instead of linking to a 403.
    assert reverse("api_key_list", kwargs={"ws_slug": "acme"}) not in html
    client.force_login(team.admin)
    html = client.get(url, HTTP_HOST="kestrel.example.com", secure=True).content.decode()
    assert reverse("api_key_list", kwargs={"ws_slug": "acme"}) in html
    assert "predict</strong> scope" in html


def test_try_page_needs_the_right_to_predict(client, team, trained):
    client.force_login(team.viewer)
    assert (
        client.get(reverse("model_try", kwargs={"ws_slug": "acme", "pk": trained.pk})).status_code
        == 403
    )


def test_model_page_links_to_try_it_and_delete(client, team, trained):
    client.force_login(team.editor)
    html = client.get(reverse("model_detail", kwargs={"ws_slug": "acme", "pk": trained.pk})).content
    assert reverse("model_try", kwargs={"ws_slug": "acme", "pk": trained.pk}).encode() in html
    assert reverse("model_delete", kwargs={"ws_slug": "acme", "pk": trained.pk}).encode() in html


def test_nav_has_models(client, team):
    client.force_login(team.viewer)
    html = client.get(reverse("project_list", kwargs={"ws_slug": "acme"})).content.decode()
    assert f'href="{_list_url()}">Models</a>' in html


# --- deleting -------------------------------------------------------------------------------


def _delete_url(model) -> str:
    return reverse("model_delete", kwargs={"ws_slug": "acme", "pk": model.pk})


def test_delete_removes_the_model_and_its_files(
    client, team, trained, django_capture_on_commit_callbacks
):
    weights = trained.weights_key
    export = ModelExport.objects.create(
        workspace=team.workspace, model=trained, format="onnx", state="succeeded"
    )
    export.file_key = default_storage.save(
        f"exports/{trained.pk}/model.onnx", ContentFile(b"onnx bytes")
    )
    export.save(update_fields=["file_key"])
    assert default_storage.exists(weights) and default_storage.exists(export.file_key)
    client.force_login(team.editor)
    page = client.get(_delete_url(trained))
    assert page.status_code == 200 and b"cannot be undone" in page.content
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(_delete_url(trained), follow=True)
    assert response.redirect_chain[-1][0] == _list_url()
    assert f"Deleted {trained.name}" in response.content.decode()
    assert not TrainedModel.objects.filter(pk=trained.pk).exists()
    assert not default_storage.exists(weights)
    assert not default_storage.exists(export.file_key)
    # The run stays, and says its model is gone.
    assert trained.job.__class__.objects.filter(pk=trained.job_id).exists()


def test_delete_is_refused_while_a_deployment_serves_the_model(client, team, trained):
    Deployment.objects.create(
        workspace=team.workspace, model=trained, slug="birds-prod", name="Birds prod"
    )
    client.force_login(team.owner)
    page = client.get(_delete_url(trained)).content.decode()
    assert 'data-testid="delete-blocked"' in page and "Birds prod" in page
    response = client.post(_delete_url(trained), follow=True)
    assert "served by the deployment “Birds prod”" in response.content.decode()
    assert TrainedModel.objects.filter(pk=trained.pk).exists()
    assert default_storage.exists(trained.weights_key)


def test_delete_is_refused_while_a_job_fine_tunes_from_it(team, trained):
    job = job_row(
        project=trained.project,
        version=trained.dataset_version,
        gpu=local_gpu(),
        name="Fine-tune",
        weights="model",
        base_model=trained,
        state=JobState.RUNNING,
    )
    with pytest.raises(ServiceError, match="starting point of “Fine-tune”"):
        model_delete(access=team.access("owner"), model=trained)
    job.state = JobState.SUCCEEDED
    job.save(update_fields=["state"])
    model_delete(access=team.access("owner"), model=trained)
    job.refresh_from_db()
    assert job.base_model is None


def test_delete_is_refused_while_it_prelabels(team, trained):
    dataset = DatasetFactory(workspace=team.workspace)
    PrelabelRun.objects.create(workspace=team.workspace, dataset=dataset, model=trained)
    with pytest.raises(ServiceError, match="pre-labelling"):
        model_delete(access=team.access("owner"), model=trained)


def test_a_viewer_cannot_delete(client, team, trained):
    client.force_login(team.viewer)
    assert client.post(_delete_url(trained)).status_code == 403
    assert TrainedModel.objects.filter(pk=trained.pk).exists()
