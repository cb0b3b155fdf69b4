""" "Train on your own machine" (issue 20): the page's commands, filled with the workspace's
real names, are what stock `ultralytics` needs to report to this project and pull this
workspace's data; its button makes one key (read + train), shown once."""

import re
import shlex
from types import SimpleNamespace

import pytest
from django.test import Client
from django.urls import reverse
from ultralytics.utils.callbacks.platform import _get_project_name

from datasets.platform_export import platform_dataset_find
from datasets.services.versions import version_create
from tests.datasets.factories import DatasetFactory, ImageFactory
from tests.training.factories import job_row, local_gpu, small_version
from tests.workspaces.factories import ProjectFactory
from workspaces.models import ApiKey
from workspaces.platform_api import platform_project_find
from workspaces.services.keys import api_key_authenticate

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(team):
    access = team.access("owner")
    project = ProjectFactory(workspace=team.workspace, name="Bird Counter (v2)!")
    version = small_version(access=access, name="Gulls & Terns")
    DatasetFactory(workspace=team.workspace, name="Unsaved")  # no version: nothing to pull
    seg = DatasetFactory(workspace=team.workspace, name="Kelp masks", task="segment")
    ImageFactory(dataset=seg)
    version_create(access=access, dataset=seg)
    return SimpleNamespace(project=project, version=version, seg=seg)


def _url(project) -> str:
    return reverse("job_own_machine", kwargs={"ws_slug": "acme", "pk": project.pk})


def _as(team, role: str) -> Client:
    client = Client()
    client.force_login(team.user(role))
    return client


def _args(command: str) -> dict[str, str]:
    """The command as the shell hands it to `yolo`: its key=value arguments."""
    words = shlex.split(command.splitlines()[-1])
    assert words[:2] == ["yolo", "train"], words
    return dict(word.split("=", 1) for word in words[2:])


def test_the_page_fills_the_commands_with_the_real_names(team, setup):
    response = _as(team, "editor").get(_url(setup.project))
    assert response.status_code == 200
    run = response.context["run"]
    env = response.context["env_lines"]
    assert env.splitlines() == [
        "export ULTRALYTICS_PLATFORM_URL=http://testserver",
        "export ULTRALYTICS_API_KEY=<your key>",
    ]
    page = response.content.decode()
    assert "pip install ultralytics" in page and run.train_command.replace("'", "&#x27;") in page
    args = _args(run.train_command)
    # The first dataset with a saved version, by name; the unsaved one cannot be picked.
    assert args == {
        "model": "yolo26n.pt",
        "data": "ul://acme/datasets/gulls-terns",
        "project": "acme/bird-counter-v2",
        "name": "run1",
    }
    assert '<option value="{}" disabled>Unsaved'.format(
        setup.project.workspace.datasets.get(name="Unsaved").pk
    ) in page.replace("\n", "")
    # What the client sends for them, and what Kestrel finds with it.
    trainer = SimpleNamespace(args=SimpleNamespace(project=args["project"], name=args["name"]))
    assert _get_project_name(trainer) == ("acme/bird-counter-v2", "run1")
    found = platform_project_find(workspace=team.workspace, ident="bird-counter-v2", not_found="no")
    assert found == setup.project
    owner, _, ident = args["data"].removeprefix("ul://").split("/")
    assert owner == "acme"
    assert platform_dataset_find(workspace=team.workspace, ident=ident, not_found="no") == (
        setup.version.dataset
    )


def test_picking_a_dataset_a_local_yaml_and_a_run_name(team, setup):
    client = _as(team, "editor")
    url = _url(setup.project)
    seg = _args(client.get(url, {"data": setup.seg.pk}).context["run"].train_command)
    assert seg["data"] == "ul://acme/datasets/kelp-masks" and seg["model"] == "yolo26n-seg.pt"
    local = client.get(url, {"data": "", "yaml": "~/my data/coco8.yaml", "name": "Night Run 2"})
    run = local.context["run"]
    assert run.errors == [] and run.dataset is None
    assert _args(run.train_command) == {
        "model": "yolo26n.pt",
        "data": "~/my data/coco8.yaml",  # quoted for the shell, whole again after it
        "project": "acme/bird-counter-v2",
        "name": "night-run-2",  # as the client slugifies it
    }
    # htmx asks only for the commands' block.
    htmx = {"HX-Request": "true", "HX-Target": "own-machine-train"}
    partial = client.get(url, {"data": setup.seg.pk}, headers=htmx)
    assert partial.content.decode().lstrip().startswith('<div id="own-machine-train"')
    assert b"<html" not in partial.content


def test_bad_picks_are_said_and_never_used(team, setup, stranger):
    foreign = DatasetFactory(workspace=stranger.memberships.get().workspace, name="Theirs")
    ImageFactory(dataset=foreign)
    client = _as(team, "editor")
    url = _url(setup.project)
    unsaved = setup.project.workspace.datasets.get(name="Unsaved")
    for data in [foreign.pk, unsaved.pk, "nope"]:
        run = client.get(url, {"data": data}).context["run"]
        assert run.errors == ["Pick a dataset of this workspace that has a saved version."]
        assert _args(run.train_command)["data"] == "data.yaml"
        assert "Theirs" not in run.train_command
    run = client.get(url, {"data": "", "yaml": "a.yaml\nrm -rf ~"}).context["run"]
    assert run.errors and _args(run.train_command)["data"] == "data.yaml"


def test_the_next_free_run_name_and_names_the_client_cannot_send(team, setup):
    job_row(
        project=setup.project, version=setup.version, gpu=local_gpu(), user=team.owner, name="Run1"
    )
    client = _as(team, "editor")
    assert client.get(_url(setup.project)).context["run"].run_name == "run2"
    ProjectFactory(workspace=team.workspace, name="bird counter v2")
    clash = client.get(_url(setup.project))
    assert clash.context["run"].project_clash == ["bird counter v2"]
    assert b'data-testid="project-clash"' in clash.content
    unnamed = ProjectFactory(workspace=team.workspace, name="鳥")
    page = client.get(_url(unnamed))
    assert page.status_code == 200 and b'data-testid="project-unnamed"' in page.content


def test_a_dataset_whose_slug_another_shares_is_named_exactly(team, setup):
    access = team.access("owner")
    for name in ("My Birds", "my-birds!"):
        dataset = DatasetFactory(workspace=team.workspace, name=name)
        ImageFactory(dataset=dataset)
        version_create(access=access, dataset=dataset)
    page = _as(team, "editor").get(_url(setup.project))
    choices = {c.dataset.name: c for c in page.context["datasets"]}
    for name in ("My Birds", "my-birds!"):
        ident = choices[name].uri.removeprefix("ul://acme/datasets/")
        found = platform_dataset_find(workspace=team.workspace, ident=ident, not_found="no")
        assert found == choices[name].dataset


def test_the_key_button_makes_one_read_and_train_key_shown_once(team, setup):
    client = _as(team, "admin")
    url = _url(setup.project)
    response = client.post(url, {"data": setup.seg.pk, "yaml": "data.yaml", "name": "run1"})
    assert response.status_code == 302
    assert response["Location"].startswith(url + "?") and "ul_" not in response["Location"]
    key = ApiKey.objects.get()
    assert key.scopes == ["read", "train"] and key.created_by == team.admin
    assert key.name == "Own machine: Bird Counter (v2)!"
    shown = client.get(response["Location"])
    raw = shown.context["new_key"]["raw"]
    assert api_key_authenticate(raw=raw) == key
    assert f"export ULTRALYTICS_API_KEY={raw}" in shown.content.decode()
    assert "no-store" in shown["Cache-Control"]
    assert _args(shown.context["run"].train_command)["data"] == "ul://acme/datasets/kelp-masks"
    for _ in range(2):  # a reload is a GET: no second key, the plaintext gone
        again = client.get(response["Location"])
        assert raw not in again.content.decode() and again.context["new_key"] is None
    assert ApiKey.objects.count() == 1


def test_with_htmx_the_button_answers_the_variables_with_the_key(team, setup):
    client = _as(team, "owner")
    url = _url(setup.project)
    response = client.post(url, {"data": ""}, headers={"HX-Request": "true"})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="own-machine-env"') and "<html" not in body
    key = ApiKey.objects.get()
    raw = re.search(r"ULTRALYTICS_API_KEY=(ul_[0-9a-f]{40})\b", body)[1]
    assert f"export ULTRALYTICS_API_KEY={raw}" in body and body.count(raw) == 1
    assert api_key_authenticate(raw=raw) == key and key.scopes == ["read", "train"]
    reload = client.get(url)
    assert raw not in reload.content.decode() and ApiKey.objects.count() == 1


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_members_who_cannot_make_keys_see_how_to_ask_and_cannot_post(team, setup, role):
    client = _as(team, role)
    page = client.get(_url(setup.project))
    assert page.status_code == 200
    assert b'data-testid="own-ask-for-key"' in page.content
    assert b'data-testid="own-create-key"' not in page.content
    assert client.post(_url(setup.project), {"data": ""}).status_code == 403
    assert client.post(_url(setup.project), headers={"HX-Request": "true"}).status_code == 403
    assert not ApiKey.objects.exists()


def test_a_stranger_gets_404_and_makes_no_key(team, setup, stranger):
    client = Client()
    client.force_login(stranger)
    assert client.get(_url(setup.project)).status_code == 404
    assert client.post(_url(setup.project)).status_code == 404
    other = ProjectFactory(workspace=stranger.memberships.get().workspace, name="Mine")
    theirs = reverse("job_own_machine", kwargs={"ws_slug": "acme", "pk": other.pk})
    assert _as(team, "owner").get(theirs).status_code == 404
    assert not ApiKey.objects.exists()


def test_links_from_the_project_page_and_the_training_form(team, setup):
    client = _as(team, "editor")
    url = _url(setup.project)
    for page in ("project_detail", "job_create"):
        response = client.get(reverse(page, kwargs={"ws_slug": "acme", "pk": setup.project.pk}))
        assert f'href="{url}"'.encode() in response.content, page


def test_the_page_queries_do_not_grow_with_datasets(team, setup, django_assert_max_num_queries):
    client = _as(team, "admin")
    client.get(_url(setup.project))  # warm the session
    with django_assert_max_num_queries(12) as few:
        client.get(_url(setup.project))
    for i in range(5):
        DatasetFactory(workspace=team.workspace, name=f"More {i}")
    with django_assert_max_num_queries(len(few.captured_queries)):
        client.get(_url(setup.project))
