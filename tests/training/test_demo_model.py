"""The demo model (issue 16): the first `make run`'s seed queues one real training job on the
demo dataset; a real worker trains it, its model becomes the demo project's current one and
public, and it finds the demo's shapes, for anyone signed in, from the Explore page.

The real demo settings are trained once in the suite, by the newcomer's journey
(tests/browser/test_journey.py: demo_model_checks), which tries the model on try-it; here jobs
train at imgsz 64 for an epoch, where the model's quality is not the point."""

import dataclasses
import json
import os

import pytest
import redis
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.urls import reverse

from datasets.services.demo import DEMO_WORKSPACE, demo_dataset_seed
from tests.training.factories import trained_model_row
from tests.training.helpers import wait_state
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from training.models import JobState, TrainedModel, TrainingJob
from training.services.demo_model import (
    DEMO_JOB_NAME,
    DEMO_PARAMS,
    DEMO_PROJECT,
)
from training.services.jobs import job_submit
from workspaces.models import Project, Role, Workspace
from workspaces.selectors import workspace_access_for_user

SEED_OUT = open(os.devnull, "w")  # noqa: SIM115 - the seed's lines are not what is tested


def _demo_job() -> TrainingJob:
    return TrainingJob.objects.select_related("project", "gpu_type").get(
        workspace__name=DEMO_WORKSPACE, name=DEMO_JOB_NAME
    )


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
