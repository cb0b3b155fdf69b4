from django.contrib import admin

from evaluations.models import Evaluation


@admin.register(Evaluation)
class EvaluationAdmin(admin.ModelAdmin):
    list_display = ("id", "model", "dataset_version", "split", "state", "created_at")
    list_filter = ("state", "task")
    raw_id_fields = ("workspace", "project", "model", "dataset_version", "created_by")
    readonly_fields = ("metrics", "per_class", "confusion", "curves", "worst_images", "log")
