"""Training jobs as a person sees them: submit, stop, cancel, resume; and the state machine
every change of a job's state goes through."""

import dataclasses
import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from core.errors import ServiceError
from core.tasks import task_send_on_commit
from datasets.models import DatasetVersion, Task
from datasets.services.health import dataset_training_blocked_reason
from datasets.services.health_checks import Kind
from datasets.services.version_checks import version_check, version_train_check
from training.metering import (
    estimated_seconds,
    hold_for_start,
    metered,
    refund_platform_failure,
    settle,
)
from training.models import (
    ACTIVE_STATES,
    FailureKind,
    InspectState,
    JobState,
    TrainedModel,
    TrainingJob,
    WeightsSource,
)
from training.services.arguments import (
    TrainParams,
    architecture_family_size,
    pretrained_weights,
    train_params_validate,
)
from training.services.catalog import gpu_pick
from training.services.jobs_resume import job_resume_refusal
from training.services.models import model_make_current
from training.signals import job_ended
from training.streams import control_key, state_rev_key, training_redis
from workspaces.models import Project
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

# A quick test run: the same settings on a small subset, for two epochs.
QUICK_TEST_EPOCHS = 2
QUICK_TEST_TRAIN_IMAGES = 32
QUICK_TEST_VAL_IMAGES = 16

TRANSITIONS: dict[str, set[str]] = {
    JobState.QUEUED: {JobState.PROVISIONING, JobState.CANCELED, JobState.FAILED},
    JobState.PROVISIONING: {
        JobState.PREPARING,
        # Every epoch already trained and stored: its model is made from the stored checkpoint
        # with no machine (training.process.finish: Finish._finish_from_checkpoint).
        JobState.SUCCEEDED,
        JobState.STOPPING,
        JobState.QUEUED,
        JobState.FAILED,
        JobState.CANCELED,
    },
    JobState.PREPARING: {
        JobState.RUNNING,
        JobState.STOPPING,
        JobState.QUEUED,
        JobState.FAILED,
        JobState.CANCELED,
    },
    JobState.RUNNING: {
        JobState.STOPPING,
        JobState.SUCCEEDED,
        JobState.STOPPED,
        JobState.FAILED,
        JobState.CANCELED,
        JobState.QUEUED,
    },
    JobState.STOPPING: {
        JobState.STOPPED,
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELED,
        JobState.QUEUED,
    },
    JobState.STOPPED: {JobState.QUEUED},
    JobState.FAILED: {JobState.QUEUED},
    JobState.SUCCEEDED: set(),
    JobState.CANCELED: set(),
}


class TransitionError(ServiceError):
    pass


def job_transition(job: TrainingJob, to: str, **fields) -> None:
    """Move a (locked) job to state `to`, saving it with `fields`; refuse a move the state
    machine does not allow."""
    if to != job.state and to not in TRANSITIONS[job.state]:
        raise TransitionError(
            f"{job.title} is {job.get_state_display().lower()}; it cannot become {to}."
        )
    job.state = to
    if to in (JobState.SUCCEEDED, JobState.STOPPED, JobState.FAILED, JobState.CANCELED):
        fields.setdefault("finished_at", timezone.now())
        fields.setdefault("lease_owner", "")
        fields.setdefault("lease_until", None)
    for name, value in fields.items():
        setattr(job, name, value)
    job.save(update_fields=["state", "updated_at", *fields])
    if to == JobState.SUCCEEDED and (job.promote_model or job.publish_model):
        _model_release(job)
    if job.is_final or to == JobState.STOPPED:
        settle(job)  # whatever it still holds goes back to available credits
        transaction.on_commit(lambda: job_ended.send(sender=TrainingJob, job=job), robust=True)
    job_state_bump(job.pk)
    if job.is_final and job.notify_email:
        transaction.on_commit(lambda: job_notify_end(job.pk))


def _model_release(job: TrainingJob) -> None:
    """What the job asked to become of its model once it succeeds: current in its project,
    public (TrainingJob.promote_model, publish_model)."""
    model = TrainedModel.objects.filter(job=job).first()
    if model is None:
        return
    if job.publish_model and not model.is_public:
        model.is_public = True
        model.save(update_fields=["is_public"])
    if job.promote_model:
        model_make_current(model=model)


def job_state_bump(job_id: int) -> None:
    """Tell live pages (training.live) that the job changed, once the change is committed."""

    def bump() -> None:
        try:
            client = training_redis()
            client.incr(state_rev_key(job_id))
            client.expire(state_rev_key(job_id), 30 * 24 * 3600)
        except Exception:  # pages notice at their next reconnect instead
            logger.warning("could not tell live pages about job %s", job_id, exc_info=True)

    transaction.on_commit(bump)


def job_notify_end(job_id: int) -> None:
    """The email a person asked for when starting the job: how it ended, and where to look."""
    job = TrainingJob.objects.select_related("workspace", "created_by").get(pk=job_id)
    if job.created_by is None or not job.created_by.email:
        return
    url = settings.SITE_URL.rstrip("/") + reverse(
        "job_detail", kwargs={"ws_slug": job.workspace.slug, "pk": job.pk}
    )
    lines = [
        f"{job.title} ({job.model_name}) in {job.workspace.name} has "
        f"{job.get_state_display().lower()}.",
        f"Epochs: {job.epochs_done} of {job.epochs}.",
    ]
    if job.error:
        lines.append(f"Reason: {job.error}")
    lines.append(f"Open it: {url}")
    try:
        send_mail(
            f"Kestrel: {job.title} {job.get_state_display().lower()}",
            "\n".join(lines),
            None,
            [job.created_by.email],
        )
    except Exception:  # a mail server that is down never changes how the job ended
        logger.warning("could not email the end of job %s", job.pk, exc_info=True)


def job_locked(job_id: int) -> TrainingJob:
    """The job row, locked until the end of the caller's transaction."""
    return TrainingJob.objects.select_for_update().get(pk=job_id)


# --- checks at submit ---------------------------------------------------------------------------


def version_task_check(version: DatasetVersion, *, task: str) -> None:
    """Refuse a version of a dataset of another task."""
    dataset = version.dataset
    if dataset.task != task:
        raise ServiceError(
            f"“{dataset.name}” is a {dataset.get_task_display().lower()} dataset; it cannot "
            f"train a {Task(task).label.lower()} model."
        )


def version_unmeasured_warning(version: DatasetVersion) -> str:
    """The data check's sentence on trained classes with no labels in val; "" when none
    (the same sentence the form's data checks and the health page show)."""
    finding = version_check(version).finding(Kind.CLASS_NOT_IN_VAL)
    return finding.sentence if finding else ""


def _in_workspace(access: WorkspaceAccess, obj, what: str) -> None:
    if not access.owns(obj):
        raise ServiceError(f"This {what} belongs to another workspace.")


# --- what a person does -----------------------------------------------------------------------


@transaction.atomic
def job_submit(
    *,
    access: WorkspaceAccess,
    project: Project,
    version: DatasetVersion,
    gpu_type_id: int | None,
    params: TrainParams,
    base_model: TrainedModel | None = None,
    quick_test: bool = False,
    name: str = "",
    notify_email: bool = False,
    budget_cap: int | None = None,
    train_anyway: bool = False,
) -> TrainingJob:
    """Check everything that can be checked before paying for a machine, then queue the job.
    The version's data checks (datasets.services.version_checks): an error refuses it, a
    warning too unless `train_anyway`."""
    access.require(Perm.TRAIN)
    _in_workspace(access, project, "project")
    _in_workspace(access, version.dataset, "dataset")
    gpu = gpu_pick(workspace=access.workspace, gpu_id=gpu_type_id)
    concurrency_check(access.workspace)
    blocked = dataset_training_blocked_reason(dataset=version.dataset)
    if blocked:
        raise ServiceError(blocked)
    version_task_check(version, task=params.task)
    facts = version_train_check(version, task=params.task, train_anyway=train_anyway)
    train_images = facts.train_images
    if params.weights == WeightsSource.MODEL and base_model is not None:
        # A fine-tune is the base model's architecture, whatever the form's family and size
        # said; an upload's is not known (None), and the form's stand.
        family_size = architecture_family_size(base_model.architecture)
        if family_size:
            family, size = family_size
            params = dataclasses.replace(params, model_family=family, model_size=size)
    if quick_test:
        train_images = min(train_images, QUICK_TEST_TRAIN_IMAGES)
        params = dataclasses.replace(
            params,
            epochs=QUICK_TEST_EPOCHS,
            batch=params.batch if params.batch < 0 else min(params.batch, train_images),
        )
    params = train_params_validate(params, train_images=train_images)
    if params.weights == WeightsSource.MODEL:
        base_model_check(access, base_model, task=params.task)
    else:
        base_model = None
    if params.weights == WeightsSource.PRETRAINED:
        pretrained_weights(params.model_family, params.model_size, params.task)
    job = TrainingJob.objects.create(
        workspace=access.workspace,
        project=project,
        dataset_version=version,
        gpu_type=gpu,
        created_by=access.user,
        name=(name.strip() or ("Quick test" if quick_test else ""))[:100],
        **dataclasses.asdict(params),  # TrainParams' fields are the job's, by name
        base_model=base_model,
        is_quick_test=quick_test,
        notify_email=notify_email,
        budget_cap=budget_cap,
        device=gpu.description or gpu.name,
        queued_at=timezone.now(),
    )
    # A priced job needs its estimate for the hold; a free one is not kept waiting for a
    # FLOPs measurement (its page re-estimates after the first epoch anyway).
    seconds = estimated_seconds(job, measure=metered(job))
    if seconds is not None:
        job.estimated_seconds = round(seconds)
        job.save(update_fields=["estimated_seconds"])
    # Refused (and nothing queued) when the credits are not there.
    hold_for_start(job, estimate_seconds=seconds)
    _enqueue(job.pk)
    return job


def concurrency_check(workspace) -> None:
    plan = workspace.plan
    limit = getattr(plan, "max_concurrent_jobs", None)
    if not limit:
        return
    running = TrainingJob.objects.for_workspace(workspace).filter(
        state__in=[JobState.QUEUED, *ACTIVE_STATES]
    )
    if running.count() >= limit:
        raise ServiceError(
            f"The {plan.name} plan runs {limit} training job{'s' if limit > 1 else ''} at a time, "
            "and that many are queued or running; wait for one to end, or stop one."
        )


def base_model_check(
    access: WorkspaceAccess, base_model: TrainedModel | None, *, task: str
) -> None:
    """A model to fine-tune for `task`: picked, of this workspace, loaded, of that task (a
    job's start, and a sweep's submit for every trial it will start)."""
    if base_model is None:
        raise ServiceError("Pick the model to fine-tune.")
    _in_workspace(access, base_model, "model")
    if base_model.inspect_state != InspectState.OK:
        raise ServiceError(
            f"“{base_model.name}” is still being checked; try again in a minute."
            if base_model.inspect_state == InspectState.PENDING
            else f"“{base_model.name}” could not be loaded: {base_model.inspect_error}"
        )
    if base_model.task != task:
        raise ServiceError(
            f"“{base_model.name}” is a {Task(base_model.task).label.lower()} model; it "
            f"cannot be fine-tuned for {Task(task).label.lower()}."
        )


def _enqueue(job_id: int) -> None:
    # robust: with the broker away the job stays queued, and the reaper sends it again.
    task_send_on_commit("training.run_job", job_id, robust=True)


def _require_job(access: WorkspaceAccess, job: TrainingJob) -> TrainingJob:
    access.require(Perm.TRAIN)
    _in_workspace(access, job, "job")
    return job_locked(job.pk)


@transaction.atomic
def job_stop(*, access: WorkspaceAccess, job: TrainingJob) -> TrainingJob:
    """Finish the current batch, validate, keep best and last weights, end as stopped."""
    job = _require_job(access, job)
    if job.is_final:
        raise ServiceError(f"{job.title} has already ended ({job.get_state_display().lower()}).")
    if job.state == JobState.QUEUED:  # nothing ran yet: there is nothing to keep
        job_transition(job, JobState.CANCELED, error="Stopped before it started.")
        return job
    if job.state != JobState.STOPPING:
        job_transition(job, JobState.STOPPING, stop_requested_at=timezone.now())
    _tell_trainer(job.pk, "stop")
    return job


def _tell_trainer(job_id: int, word: str) -> None:
    """Pass stop or cancel on at once; the supervisor's next heartbeat does it too, should
    Redis be away right now."""

    def send() -> None:
        try:
            training_redis().set(control_key(job_id), word, ex=7 * 24 * 3600)
        except Exception:  # the heartbeat path still carries it
            logger.warning("could not tell job %s's trainer to %s", job_id, word, exc_info=True)

    transaction.on_commit(send)


@transaction.atomic
def job_cancel(*, access: WorkspaceAccess, job: TrainingJob) -> TrainingJob:
    """End the job at once: the trainer's processes are killed, no model is made."""
    job = _require_job(access, job)
    if job.is_final:
        raise ServiceError(f"{job.title} has already ended ({job.get_state_display().lower()}).")
    if job.state == JobState.QUEUED:
        job_transition(job, JobState.CANCELED, cancel_requested_at=timezone.now())
    else:  # the supervising task kills the trainer and ends the job
        job.cancel_requested_at = timezone.now()
        job.save(update_fields=["cancel_requested_at", "updated_at"])
        job_state_bump(job.pk)
        _tell_trainer(job.pk, "cancel")
    return job


@transaction.atomic
def job_resume(*, access: WorkspaceAccess, job: TrainingJob) -> TrainingJob:
    """Queue a stopped job, or one that failed in a way another attempt may get past, again;
    it continues from its last checkpoint."""
    job = _require_job(access, job)
    refusal = job_resume_refusal(job)
    if refusal:
        raise ServiceError(refusal)
    concurrency_check(job.workspace)
    job_requeue(job, lost=False)
    # Hold what is left at the pace of its own epochs (the estimator's figure before any).
    from training.estimator import reestimate

    after = reestimate(job)
    hold_for_start(job, estimate_seconds=after.seconds_left if after else None)
    return job


def job_requeue(job: TrainingJob, *, lost: bool, error: str = "") -> None:
    """Back to the queue (a locked job): from its checkpoint when it has one."""
    job_transition(
        job,
        JobState.QUEUED,
        lost_attempts=job.lost_attempts + 1 if lost else 0,
        stop_requested_at=None,
        cancel_requested_at=None,
        lease_owner="",
        lease_until=None,
        finished_at=None,
        error=error,
        failure_kind="",
        queued_at=timezone.now(),
    )
    _enqueue(job.pk)


def lease_seconds() -> float:
    """How long a job's lease lasts without a heartbeat: three beats."""
    return 3 * settings.TRAINING_HEARTBEAT_SECONDS


def job_lost(job: TrainingJob, message: str) -> None:
    """A (locked) job whose attempt was lost: resume it, or fail it after too many losses."""
    if job.cancel_requested_at:
        job_transition(job, JobState.CANCELED)
    elif job.lost_attempts + 1 >= settings.TRAINING_MAX_ATTEMPTS:
        error = f"The run was lost {job.lost_attempts + 1} times; last: {message}"
        job_transition(
            job,
            JobState.FAILED,
            lost_attempts=job.lost_attempts + 1,
            error=error,
            failure_kind=FailureKind.LOST,
        )
        refund_platform_failure(job, error)
    else:
        job_requeue(job, lost=True, error="")
