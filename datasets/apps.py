from django.apps import AppConfig


class DatasetsConfig(AppConfig):
    name = "datasets"
    verbose_name = "Datasets"

    def ready(self) -> None:
        from core.leases import long_job_register

        long_job_register("datasets.services.ingest.IMPORT_JOB")
        long_job_register("datasets.services.health_runs.HEALTH_JOB")
