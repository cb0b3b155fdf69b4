"""Everything refused at submit, before a machine is paid for: each with a reason a person can
act on, and no job row left behind."""

import pytest
from django.core.exceptions import PermissionDenied

from core.errors import ServiceError
from datasets.models import Label
from datasets.services.versions import version_create
from tests.training.helpers import SHARED, single_class_copy, version_of
from training.models import GpuType, JobState, TrainedModel, TrainingJob
from training.services.arguments import TrainParams
from training.services.jobs import (
    job_cancel,
    job_resume,
    job_stop,
    job_submit,
    version_unmeasured_warning,
)
from workspaces.selectors import workspace_access_for_user

pytestmark = pytest.mark.django_db


def params(task="detect", **kw) -> TrainParams:
    base = dict(
        task=task,
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


def access_of(team, role="editor"):
    return workspace_access_for_user(user=getattr(team, role), slug=team.workspace.slug)


def refused(team, project, version, gpu, p, match: str, **kw):
    with pytest.raises(ServiceError, match=match):
        job_submit(
            access=access_of(team),
            project=project,
            version=version,
            gpu_type_id=gpu.pk,
            params=p,
            **kw,
        )
    assert not TrainingJob.objects.exists()


def test_a_good_submit_queues_the_job(team, project, detect_version, gpu_local):
    job = job_submit(
        access=access_of(team),
        project=project,
        version=detect_version,
        gpu_type_id=gpu_local.pk,
        params=params(),
    )
    assert job.state == JobState.QUEUED and job.queued_at is not None
    assert job.model_name == "yolo11n" and job.device.startswith("CPU")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"epochs": 0}, "Epochs must be at least 1"),
        ({"imgsz": 100}, "multiple of 32"),
        ({"batch": 8}, "larger than the 4 training images"),
        ({"task": "segment"}, "is a detect dataset; it cannot train a segment"),
        ({"extra_args": {"lr0": "fast"}}, "lr0"),
    ],
)
def test_bad_arguments_are_refused(team, project, detect_version, gpu_local, change, match):
    refused(team, project, detect_version, gpu_local, params(**change), match)


def test_a_version_with_no_labels_is_refused(team, project, detect_version, gpu_local):
    Label.objects.filter(image__dataset=detect_version.dataset).delete()
    empty = version_create(access=access_of(team), dataset=detect_version.dataset)
    refused(team, project, empty, gpu_local, params(), "cannot be trained: No labels at all")
    # An error refuses whatever “Train anyway” says.
    refused(team, project, empty, gpu_local, params(), "No labels at all", train_anyway=True)


def test_a_class_missing_from_val_is_trained_with_a_warning(team, project, gpu_local):
    # coco8 as it is: its train classes (giraffe, zebra, ...) never appear in val. Ultralytics
    # trains it and measures mAP over the classes val has, so it is trained once told to
    # (tests/training/test_data_checks.py has the rest of the rule set).
    version = version_of(
        user=team.owner,
        workspace=team.workspace,
        folder=SHARED / "coco8",
        task="detect",
        name="coco8 raw",
    )
    refused(team, project, version, gpu_local, params(), "Tick “Train anyway”")
    job = job_submit(
        access=access_of(team),
        project=project,
        version=version,
        gpu_type_id=gpu_local.pk,
        params=params(),
        train_anyway=True,
    )
    assert job.state == JobState.QUEUED
    warning = version_unmeasured_warning(version)
    assert "“giraffe”" in warning and "no labels in val" in warning
    assert "move some of their images to val" in warning


def test_a_version_with_every_class_in_val_has_no_warning(detect_version):
    assert version_unmeasured_warning(detect_version) == ""


def test_a_version_without_val_is_refused(team, project, gpu_local, tmp_path):
    folder = single_class_copy(SHARED / "coco8", tmp_path / "c")
    for image in (folder / "images" / "val").iterdir():
        image.rename(folder / "images" / "train" / image.name)
    for label in (folder / "labels" / "val").iterdir():
        label.rename(folder / "labels" / "train" / label.name)
    version = version_of(
        user=team.owner, workspace=team.workspace, folder=folder, task="detect", name="noval"
    )
    refused(team, project, version, gpu_local, params(), "No image is in the val split")
    refused(
        team,
        project,
        version,
        gpu_local,
        params(),
        "No image is in the val split",
        train_anyway=True,
    )


def test_fine_tuning_a_model_of_another_task_is_refused(team, project, detect_version, gpu_local):
    other = TrainedModel.objects.create(
        workspace=team.workspace,
        project=project,
        name="seg",
        task="segment",
        architecture="yolo11n-seg",
        imgsz=64,
        weights_key="models/x.pt",
    )
    refused(
        team,
        project,
        detect_version,
        gpu_local,
        params(weights="model"),
        "segment model; it cannot be fine-tuned",
        base_model=other,
    )


def test_pretrained_weights_missing_offline_are_refused(team, project, detect_version, gpu_local):
    refused(team, project, detect_version, gpu_local, params(weights="pretrained"), "yolo11n.pt")


def test_a_machine_whose_provider_is_not_configured_is_refused(team, project, detect_version):
    from training.services.catalog import gpu_catalog_seed

    gpu_catalog_seed()
    h100 = GpuType.objects.get(slug__contains="h100")
    refused(team, project, detect_version, h100, params(), "not configured")


def test_a_workspace_blocking_unhealthy_datasets_refuses(team, project, detect_version, gpu_local):
    from datasets.models import DatasetVersion

    team.workspace.block_training_on_dataset_errors = True
    team.workspace.save()
    version = DatasetVersion.objects.get(pk=detect_version.pk)
    refused(team, project, version, gpu_local, params(), "health check has not run")


def test_a_viewer_cannot_train(team, project, detect_version, gpu_local):
    with pytest.raises(PermissionDenied):
        job_submit(
            access=access_of(team, "viewer"),
            project=project,
            version=detect_version,
            gpu_type_id=gpu_local.pk,
            params=params(),
        )


def test_a_quick_test_run_is_two_epochs_on_a_subset(team, project, detect_version, gpu_local):
    job = job_submit(
        access=access_of(team),
        project=project,
        version=detect_version,
        gpu_type_id=gpu_local.pk,
        params=params(epochs=300, batch=4),
        quick_test=True,
    )
    assert job.is_quick_test and job.epochs == 2 and job.name == "Quick test"


def test_stop_cancel_and_resume_follow_the_state_machine(team, project, detect_version, gpu_local):
    access = access_of(team)
    job = job_submit(
        access=access,
        project=project,
        version=detect_version,
        gpu_type_id=gpu_local.pk,
        params=params(),
    )
    job = job_stop(access=access, job=job)
    assert job.state == JobState.CANCELED  # nothing ran: nothing to keep
    with pytest.raises(ServiceError, match="already ended"):
        job_cancel(access=access, job=job)
    with pytest.raises(ServiceError, match="Only a stopped or failed job"):
        job_resume(access=access, job=job)
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.STOPPED, checkpoint_epoch=1)
    job = job_resume(access=access, job=TrainingJob.objects.get(pk=job.pk))
    assert job.state == JobState.QUEUED and job.lost_attempts == 0


def test_a_dataset_that_trained_a_job_cannot_be_deleted_but_its_workspace_can(
    team, project, detect_version, gpu_local
):
    from datasets.models import Dataset
    from datasets.services.datasets import dataset_delete
    from workspaces.models import Workspace

    access = access_of(team, "owner")
    job_submit(
        access=access,
        project=project,
        version=detect_version,
        gpu_type_id=gpu_local.pk,
        params=params(),
    )
    dataset = detect_version.dataset
    with pytest.raises(
        ServiceError, match=r"training jobs or models were made from its versions \(v1\)"
    ):
        dataset_delete(access=access, dataset=dataset, confirm_name=dataset.name)
    assert Dataset.objects.filter(pk=dataset.pk).exists()
    Workspace.objects.filter(pk=team.workspace.pk).delete()  # everything in it goes together
    assert not TrainingJob.objects.exists()
