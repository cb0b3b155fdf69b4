from celery import shared_task

from training import reaper, supervisor

WEEK = 7 * 24 * 3600


# No time limit that a long run could hit, and acks_late off: if the worker dies, the reaper
# resumes the job; the broker never re-delivers it to a second worker while the first runs.
@shared_task(name="training.run_job", acks_late=False, soft_time_limit=WEEK, time_limit=WEEK)
def run_job(job_id: int) -> str:
    return supervisor.run_job(job_id)


@shared_task(name="training.jobs_reap", acks_late=False)
def jobs_reap() -> int:
    return reaper.jobs_reap()
