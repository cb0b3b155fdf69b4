"""Dataset background work. Each task: ids in, load, guard, call a service."""

import logging

from celery import shared_task

logger = logging.getLogger(__name__)


def _log_unexpected(task: str, kwargs: dict) -> None:
    if kwargs:
        logger.warning("%s: unexpected arguments %s", task, sorted(kwargs))


@shared_task(name="datasets.import_run", soft_time_limit=3 * 3600, time_limit=3 * 3600 + 300)
def import_run_task(import_id: int, **kwargs) -> None:
    """Import an uploaded archive or batch of files. Idempotent: a finished import is left alone."""
    _log_unexpected("datasets.import_run", kwargs)
    from datasets.services.ingest import import_run

    import_run(import_id=import_id)


@shared_task(name="datasets.thumbnails_make", acks_late=True, soft_time_limit=600, time_limit=660)
def thumbnails_make_task(blob_ids: list[int], **kwargs) -> int:
    _log_unexpected("datasets.thumbnails_make", kwargs)
    from datasets.services.thumbnails import thumbnails_make

    return thumbnails_make(blob_ids=blob_ids)


# Not acks_late: the run's row owns its state (a lease), and beat's reaper re-sends it.
@shared_task(name="datasets.health_run", soft_time_limit=1800, time_limit=1900)
def health_run_task(dataset_id: int, **kwargs) -> None:
    """Run the dataset's queued health check. Idempotent: none queued, nothing to do."""
    _log_unexpected("datasets.health_run", kwargs)
    from datasets.services.health_runs import health_run_execute

    health_run_execute(dataset_id=dataset_id)


@shared_task(
    name="datasets.blobs_collect_garbage", acks_late=True, soft_time_limit=1800, time_limit=1900
)
def blobs_collect_garbage_task(**kwargs) -> int:
    _log_unexpected("datasets.blobs_collect_garbage", kwargs)
    from datasets.services.datasets import blobs_collect_garbage
    from datasets.services.import_report import import_reports_collect_garbage

    return blobs_collect_garbage() + import_reports_collect_garbage()


@shared_task(
    name="datasets.uploads_expire_stale", acks_late=True, soft_time_limit=600, time_limit=660
)
def uploads_expire_stale_task(**kwargs) -> int:
    _log_unexpected("datasets.uploads_expire_stale", kwargs)
    from datasets.services.uploads import uploads_expire_stale

    return uploads_expire_stale()


@shared_task(
    name="datasets.semantic_convert", acks_late=True, soft_time_limit=3600, time_limit=3700
)
def semantic_convert_task(source_id: int, target_id: int, **kwargs) -> int:
    """Draw the masks of a semantic dataset made from a segment one. Idempotent: images that
    have their mask are left alone."""
    _log_unexpected("datasets.semantic_convert", kwargs)
    from datasets.services.semantic_convert import semantic_convert_run

    return semantic_convert_run(source_id=source_id, target_id=target_id)
