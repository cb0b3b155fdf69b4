from django.apps import AppConfig


class SweepsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "sweeps"
    verbose_name = "Sweeps"

    def ready(self) -> None:
        from sweeps.receivers import trial_job_ended
        from training.signals import job_ended

        job_ended.connect(trial_job_ended, dispatch_uid="sweeps.trial_job_ended")
