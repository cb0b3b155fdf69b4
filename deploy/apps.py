from django.apps import AppConfig


class DeployConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "deploy"
    verbose_name = "Deploy"

    def ready(self) -> None:
        from core.leases import long_job_register

        long_job_register("deploy.exports.EXPORT_JOB")

        from deploy.selectors import predict_lookup_watch

        predict_lookup_watch()
