"""Exports of trained models to other formats (being written)."""

from celery import shared_task


@shared_task(name="deploy.export_run")
def export_run(export_id: int, **kwargs) -> None:
    raise NotImplementedError
