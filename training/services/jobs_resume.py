"""Whether Resume can help a job: the one rule read by the job page's button, the live page,
the API's job and training.services.jobs.job_resume."""

from training.models import FailureKind, JobKind, JobState, TrainedModel, TrainingJob

# Failures that would happen again as they are: Resume runs the same machine type, data,
# settings and weights. What the person can do instead.
_REPEATING = {
    FailureKind.REFUSED: (
        "it was refused while preparing, before training, and would be again; start a new job "
        "once what its reason says is changed"
    ),
    FailureKind.DOWNLOAD: (
        "its pretrained weights could not be downloaded, and that would fail again; start a new "
        "job once the file is on the server, or train from scratch"
    ),
    FailureKind.WEIGHTS: (
        "its weights file was refused, and would be again; start a new job from other weights"
    ),
    FailureKind.START: (
        "training never began (Ultralytics refused the model, the data or the arguments), and "
        "would not again; start a new job with what its reason says changed"
    ),
}
# Failures another attempt may get past, once it can start from a checkpoint: without one it
# would run the same first epoch the same way.
_NEED_CHECKPOINT = {
    FailureKind.OUT_OF_MEMORY: (
        "it ran out of memory before its first checkpoint, and would again with the same batch "
        "and image size; start a new job with a lower batch or image size"
    ),
    FailureKind.CRASH: (
        "it failed before its first checkpoint, so there is nothing to continue from; start a "
        "new job"
    ),
}


def job_resume_refusal(job: TrainingJob) -> str:
    """Why Resume cannot help `job` ("" when it can): a stopped job, or one that failed in a way
    another attempt may get past (a lost worker, Kestrel's own error, or out of memory or a
    crash after a checkpoint)."""
    if job.kind == JobKind.EXTERNAL:
        return (
            f"{job.title} trains on its own machine: run the same yolo command there with "
            "resume=True to continue it."
        )
    if job.state not in (JobState.STOPPED, JobState.FAILED):
        return (
            f"Only a stopped or failed job can be resumed; {job.title} is "
            f"{job.get_state_display().lower()}."
        )
    if job.checkpoint_epoch is not None and job.checkpoint_epoch >= job.epochs:
        if (
            job.inspected_weights.get("last.pt")
            and not TrainedModel.objects.filter(job=job).exists()
        ):
            return ""  # its model is made from the stored checkpoint, with no machine
        return f"{job.title} already trained all {job.epochs} epochs."
    if job.state != JobState.FAILED:
        return ""
    why = _REPEATING.get(job.failure_kind)
    if why is None and job.checkpoint_epoch is None:
        why = _NEED_CHECKPOINT.get(job.failure_kind)
    return f"{job.title} cannot be resumed: {why}." if why else ""
