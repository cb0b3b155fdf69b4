from django.apps import AppConfig


class TrainingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "training"
    verbose_name = "Training"

    def ready(self) -> None:
        from core.leases import long_job_register

        long_job_register("training.services.inspection.INSPECT_JOB")
        long_job_register("training.reaper.jobs_reap")  # its own rule: resume from a checkpoint
        # Runs on users' own machines whose client went silent: marked lost.
        long_job_register("training.services.external_runs.external_runs_reap")
