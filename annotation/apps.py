from django.apps import AppConfig


class AnnotationConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "annotation"
    verbose_name = "Annotation"

    def ready(self) -> None:
        from core.leases import long_job_register

        long_job_register("annotation.prelabel.PRELABEL_JOB")
