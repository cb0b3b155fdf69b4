"""The demo model (issue 16): the first `make run`'s seed queues one real training job on the
demo dataset; a real worker trains it, its model becomes the demo project's current one and
public, and it finds the demo's shapes, for anyone signed in, from the Explore page.

The first test trains the real demo settings (about two minutes of CPU; listed in SLOW_FIRST);
the others train at imgsz 64 for an epoch, where the model's quality is not the point."""

import dataclasses
import io
import json
import os
import time

import pytest
import redis
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.urls import reverse

from datasets.services.demo import DEMO_WORKSPACE, TRAIN, demo_dataset_seed, demo_images
from tests.deploy.conftest import inference_server_start
from tests.training.factories import trained_model_row
from tests.training.helpers import wait_state
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from training.models import JobState, TrainedModel, TrainingJob
from training.services.demo_model import (
    DEMO_JOB_NAME,
    DEMO_PARAMS,
    DEMO_PROJECT,
    demo_val_found,
)
from training.services.jobs import job_submit
from training.services.models import model_local_path
from workspaces.models import Project, Role, Workspace
from workspaces.selectors import workspace_access_for_user

SEED_OUT = open(os.devnull, "w")  # noqa: SIM115 - the seed's lines are not what is tested


def _demo_job() -> TrainingJob:
    return TrainingJob.objects.select_related("project", "gpu_type").get(
        workspace__name=DEMO_WORKSPACE, name=DEMO_JOB_NAME
    )


@pytest.mark.django_db(transaction=True)
def test_the_first_run_trains_a_demo_model_that_finds_the_shapes(
    plans, workers, stranger, tmp_path, settings
):
    call_command("seed_demo", stdout=SEED_OUT)
    job = _demo_job()
    started = time.monotonic()
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=900)
    seconds = time.monotonic() - started
    assert job.state == JobState.SUCCEEDED, job.error
    print(f"\ndemo job: {job.epochs_done} epochs, {seconds:.0f} s from queued to succeeded")
    model = TrainedModel.objects.get(job=job)
    assert model.is_current and model.is_public
    assert model.project.name == DEMO_PROJECT and model.class_names == [
        "circle",
        "square",
        "triangle",
    ]

    # It finds the val images' shapes: the right class, confidence above 0.5, IoU >= 0.5.
    found, total = demo_val_found(model_local_path(model))
    print(f"demo model: {found} of {total} val shapes found with confidence > 0.5")
    assert found >= 0.8 * total

    # The Explore page shows it; someone outside the demo team tries it with their session.
    dataset = job.dataset_version.dataset
    explore = Client().get(reverse("public_dataset", kwargs={"pk": dataset.pk}))
    assert f'data-model="{model.pk}"' in explore.content.decode()
    client = Client()
    client.force_login(stranger)
    page = client.get(reverse("public_model_try", kwargs={"pk": model.pk}))
    assert page.status_code == 200
    server = inference_server_start(tmp_path, "--name", "shared")
    try:
        settings.INFERENCE_URL = server.url
        data, labels = demo_images()[TRAIN]
        upload = io.BytesIO(data)
        upload.name = "shapes_100.jpg"
        response = client.post(f"/api/v1/models/{model.pk}/predict", {"file": upload})
    finally:
        server.stop()
    assert response.status_code == 200, response.content
    results = response.json()["images"][0]["results"]
    sure = [r for r in results if r["confidence"] > 0.5]
    assert len(sure) >= len(labels) and all({"x1", "y1", "x2", "y2"} <= set(r["box"]) for r in sure)
    assert {r["name"] for r in sure} == {["circle", "square", "triangle"][c] for c, _ in labels}


@pytest.mark.django_db(transaction=True)
def test_seeding_queues_the_demo_job_once_on_the_project_page(plans, _empty_training_queue):
    call_command("seed_demo", stdout=SEED_OUT)
    call_command("seed_demo", stdout=SEED_OUT)  # make run again: no second job
    job = _demo_job()
    assert TrainingJob.objects.count() == 1
    assert Project.objects.filter(workspace=job.workspace, name=DEMO_PROJECT).count() == 1
    assert job.state == JobState.QUEUED and job.gpu_type.slug == "local"
    assert job.weights == "scratch" and job.promote_model and job.publish_model
    fields = {f.name for f in dataclasses.fields(DEMO_PARAMS)}
    assert {name: getattr(job, name) for name in fields} == dataclasses.asdict(DEMO_PARAMS)
    assert job.dataset_version == job.dataset_version.dataset.versions.get()
    # Sent once to the training queue, as any job is (no worker takes it here).
    [message] = _training_queue()
    assert message["headers"]["task"] == "training.run_job"
    assert message["headers"]["argsrepr"] == f"({job.pk},)"
    admin = job.created_by
    client = Client()
    client.force_login(admin)
    page = client.get(
        reverse("project_detail", kwargs={"ws_slug": job.workspace.slug, "pk": job.project_id})
    ).content.decode()
    assert DEMO_JOB_NAME in page
    assert reverse("job_detail", kwargs={"ws_slug": job.workspace.slug, "pk": job.pk}) in page


@pytest.fixture
def _empty_training_queue():
    """No message of an earlier test before, none left for a later test's worker after."""
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    broker.delete(django_settings.TRAINING_QUEUE)
    yield
    broker.delete(django_settings.TRAINING_QUEUE)


def _training_queue() -> list[dict]:
    """The messages waiting on this suite's training queue (kombu's JSON envelopes)."""
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    return [json.loads(raw) for raw in broker.lrange(django_settings.TRAINING_QUEUE, 0, -1)]


@pytest.mark.django_db(transaction=True)
def test_a_job_that_asks_makes_its_model_current_and_public_when_it_succeeds(
    plans, workers, gpu_local
):
    owner = UserFactory(email="owner@demo.test")
    team = WorkspaceFactory(name=DEMO_WORKSPACE, slug="demo-team", created_by=owner)
    MembershipFactory(workspace=team, user=owner, role=Role.OWNER)
    dataset = demo_dataset_seed()
    access = workspace_access_for_user(user=owner, slug=team.slug)
    project = Project.objects.create(workspace=team, name=DEMO_PROJECT, created_by=owner)
    earlier = trained_model_row(workspace=team, class_names=["circle"])
    TrainedModel.objects.filter(pk=earlier.pk).update(project=project, is_current=True)
    tiny = dataclasses.replace(DEMO_PARAMS, epochs=1, imgsz=64, extra_args={"plots": False})

    def submit(**asks) -> TrainingJob:
        with transaction.atomic():  # asked before the worker gets the job, as the seed does
            job = job_submit(
                access=access,
                project=project,
                version=dataset.versions.get(),
                gpu_type_id=gpu_local.pk,
                params=tiny,
            )
            TrainingJob.objects.filter(pk=job.pk).update(**asks)
        return job

    workers.start()
    # One after the other: the Free plan runs one job at a time.
    plain = wait_state(submit(), JobState.SUCCEEDED, JobState.FAILED)
    asking = wait_state(
        submit(promote_model=True, publish_model=True), JobState.SUCCEEDED, JobState.FAILED
    )
    assert plain.state == asking.state == JobState.SUCCEEDED, (plain.error, asking.error)
    plain_model = TrainedModel.objects.get(job=plain)
    assert not plain_model.is_current and not plain_model.is_public
    model = TrainedModel.objects.get(job=asking)
    assert model.is_current and model.is_public
    assert list(TrainedModel.objects.filter(project=project, is_current=True)) == [model]
    assert not TrainedModel.objects.get(pk=earlier.pk).is_public
    assert Workspace.objects.get(pk=team.pk).models.filter(is_public=True).count() == 1
