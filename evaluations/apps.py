from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "evaluations"
    verbose_name = "Evaluations"

    def ready(self) -> None:
        from core.leases import long_job_register

        long_job_register("evaluations.services.run.EVALUATION_JOB")
