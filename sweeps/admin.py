from django.contrib import admin

from sweeps.models import Sweep, SweepTrial


class SweepTrialInline(admin.TabularInline):
    model = SweepTrial
    extra = 0
    raw_id_fields = ("job",)
    readonly_fields = ("number", "params", "state", "value", "intermediate", "cost")


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "project", "state", "n_trials", "budget", "created_at")
    list_filter = ("state", "task")
    raw_id_fields = ("workspace", "project", "dataset_version", "gpu_type", "created_by")
    inlines = [SweepTrialInline]
