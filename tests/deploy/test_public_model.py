"""A public model (the demo's, TrainedModel.is_public) as someone outside its workspace meets
it: on its dataset's Explore page, on its try-it page, through the predict API with their
browser session (a real model server and a real detector), and nowhere else: no weights, no
model page, no API key of theirs, and a private model's id is the same 404 as an unknown one."""

from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from datasets.services.versions import version_create
from deploy.models import Deployment, DeploymentState
from deploy.ratelimit import _redis
from tests.clock import well_inside_a_minute
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, LabelFactory
from tests.deploy.conftest import confident_copy, tiny_model_train
from tests.training.factories import trained_model_row
from workspaces.models import Membership
from workspaces.selectors import workspace_access_for_user
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db
IMAGE = (
    Path(__file__).resolve().parents[2].parent / "shared/datasets/coco8/images/val/000000000036.jpg"
)
UNKNOWN_ID = 987654


@pytest.fixture(autouse=True)
def _fresh_limits():
    r = _redis()
    for key in r.scan_iter("kestrel:ratelimit:*"):
        r.delete(key)
    cache.clear()


@pytest.fixture
def public_dataset(team):
    dataset = DatasetFactory(workspace=team.workspace, name="Shapes (demo)", is_public=True)
    cls = DatasetClassFactory(dataset=dataset, index=0, name="person")
    for split in ("train", "train", "val", "val"):
        LabelFactory(image=ImageFactory(dataset=dataset, split=split), dataset_class=cls)
    return dataset


@pytest.fixture
def public_version(team, public_dataset):
    return version_create(access=team.access("owner"), dataset=public_dataset)


def _model(team, version, weights: bytes, *, public: bool):
    model = trained_model_row(workspace=team.workspace, class_names=["person"], weights=weights)
    model.dataset_version = version
    model.is_public = public
    model.metrics = {"metrics/mAP50-95(B)": 0.8123}
    model.save(update_fields=["dataset_version", "is_public", "metrics"])
    return model


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> bytes:
    """A real detector, sure of class 0 (only the detect one of conftest's models)."""
    work = tmp_path_factory.mktemp("public-detector")
    return confident_copy(tiny_model_train("detect", work), work / "confident.pt").read_bytes()


@pytest.fixture
def public_model(team, public_version, detector):
    return _model(team, public_version, detector, public=True)


@pytest.fixture
def private_model(team, public_version, detector):
    """Trained on the same public dataset, never published."""
    return _model(team, public_version, detector, public=False)


@pytest.fixture
def stranger_client(stranger) -> Client:
    client = Client()
    client.force_login(stranger)
    return client


def _predict(client, model_id: int, **params):
    with IMAGE.open("rb") as f:
        return client.post(f"/api/v1/models/{model_id}/predict", {"file": f, **params})


def test_the_explore_page_offers_the_public_model_and_not_the_private_one(
    public_dataset, public_model, private_model, stranger_client
):
    url = reverse("public_dataset", kwargs={"pk": public_dataset.pk})
    try_url = reverse("public_model_try", kwargs={"pk": public_model.pk})
    page = stranger_client.get(url).content.decode()
    assert "Try the demo model" in page and f'href="{try_url}"' in page
    assert "mAP50-95 0.812" in page
    assert f'data-model="{public_model.pk}"' in page
    assert f'data-model="{private_model.pk}"' not in page
    anonymous = Client().get(url).content.decode()
    assert "Log in to try it" in anonymous and "next=/explore/models/" in anonymous


def test_a_stranger_tries_the_public_model_and_it_finds_boxes(
    team, public_model, stranger_client, inference_server, settings
):
    settings.INFERENCE_URL = inference_server.url
    page = stranger_client.get(reverse("public_model_try", kwargs={"pk": public_model.pk}))
    assert page.status_code == 200
    html = page.content.decode()
    predict_path = f"/api/v1/models/{public_model.pk}/predict"
    assert f'data-predict-url="{predict_path}"' in html and 'id="try-canvas"' in html
    # The dataset's val pictures, offered to run it on, by their public addresses.
    assert html.count('data-testid="try-sample"') == 2
    assert f"/explore/datasets/{public_model.dataset_version.dataset_id}/images/" in html
    # Nothing that leads into the team's workspace, and no API key to ask for.
    assert f"/w/{team.workspace.slug}/" not in html and "Call it from code" not in html

    response = _predict(stranger_client, public_model.pk, conf="0.25", imgsz="320")
    assert response.status_code == 200, response.content
    [image] = response.json()["images"]
    assert image["results"], "a model sure of class 0 finds something"
    assert {"x1", "y1", "x2", "y2"} <= set(image["results"][0]["box"])


def test_a_private_model_is_the_same_404_as_an_unknown_id(private_model, stranger_client):
    unknown = _predict(stranger_client, UNKNOWN_ID)
    private = _predict(stranger_client, private_model.pk)
    assert unknown.status_code == private.status_code == 404
    assert private.json() == unknown.json()
    for pk in (UNKNOWN_ID, private_model.pk):
        page = stranger_client.get(reverse("public_model_try", kwargs={"pk": pk}))
        assert page.status_code == 404


def test_a_private_model_has_no_public_page_even_for_its_team(team, private_model):
    client = Client()
    client.force_login(team.owner)
    response = client.get(reverse("public_model_try", kwargs={"pk": private_model.pk}))
    assert response.status_code == 404


def test_the_stranger_gets_nothing_of_the_public_model_but_predictions(
    team, public_model, stranger, stranger_client
):
    ws = {"ws_slug": team.workspace.slug, "pk": public_model.pk}
    for name in ("model_weights", "model_detail", "model_try", "model_delete"):
        assert stranger_client.get(reverse(name, kwargs=ws)).status_code == 404, name
    assert stranger_client.get(f"/api/v1/models/{public_model.pk}/weights").status_code == 404
    assert stranger_client.get(f"/api/v1/models/{public_model.pk}").status_code == 404
    assert stranger_client.post(reverse("model_promote", kwargs=ws)).status_code == 404
    models_page = reverse("model_list", kwargs={"ws_slug": team.workspace.slug})
    assert stranger_client.get(models_page).status_code == 404
    # A key of the stranger's own workspace acts for that workspace only.
    own = Membership.objects.get(user=stranger).workspace
    _, raw = api_key_create(
        access=workspace_access_for_user(user=stranger, slug=own.slug),
        name="theirs",
        scopes=["predict"],
    )
    keyed = Client(headers={"Authorization": f"Bearer {raw}"})
    assert _predict(keyed, public_model.pk).status_code == 404
    # Signed out: the API asks who is calling, the page asks to log in.
    assert _predict(Client(), public_model.pk).status_code == 401
    page = Client().get(reverse("public_model_try", kwargs={"pk": public_model.pk}))
    assert page.status_code == 302 and page["Location"].startswith(reverse("account_login"))


def test_the_stranger_is_rate_limited_per_person_like_the_try_page(
    team, public_model, stranger_client, settings
):
    settings.INFERENCE_URL = "http://127.0.0.1:9"  # nothing listens: each call is a quick 503
    well_inside_a_minute()
    plan = team.workspace.plan
    plan.predict_requests_per_minute = 2
    plan.save(update_fields=["predict_requests_per_minute"])
    statuses = [_predict(stranger_client, public_model.pk).status_code for _ in range(3)]
    assert statuses == [503, 503, 429]
    refused = _predict(stranger_client, public_model.pk)
    assert "per person" in refused.json()["detail"] and int(refused["Retry-After"]) > 0


def test_a_viewer_of_its_own_team_may_try_the_public_model_but_not_the_private_one(
    team, public_model, private_model, settings
):
    settings.INFERENCE_URL = "http://127.0.0.1:9"  # past the checks, the server is "down"
    client = Client()
    client.force_login(team.viewer)  # a viewer may not call the team's models
    assert _predict(client, private_model.pk).status_code == 403
    assert _predict(client, public_model.pk).status_code == 503  # let in, as anyone is


def test_the_teams_dedicated_endpoint_of_the_public_model_is_not_the_strangers(
    team, public_model, stranger_client
):
    Deployment.objects.create(
        workspace=team.workspace,
        model=public_model,
        name="Demo live",
        slug="demo-live-abc123",
        state=DeploymentState.RUNNING,
        port=9,
    )
    with IMAGE.open("rb") as f:
        response = stranger_client.post("/d/demo-live-abc123/predict", {"file": f})
    assert response.status_code == 404
