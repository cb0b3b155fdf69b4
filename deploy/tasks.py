"""Deploy background work. The export task lives in deploy.exports; it is imported here so
Celery's autodiscovery registers it."""

from deploy.exports import export_run  # noqa: F401
