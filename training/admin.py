from django.contrib import admin

from training.models import GpuType, TrainedModel, TrainingJob, WorkspaceRecipe
from training.services.cloud_prices import catalog_summary


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    """The catalog: each type's price (set, or the operator's cost plus a markup), its provider
    and what the provider rents for it, beside SkyPilot's catalog price for the same GPUs."""

    list_display = [
        "name",
        "provider",
        "vram_gb",
        "hourly_price",
        "operator_hourly_cost",
        "markup_percent",
        "is_active",
        "sort_order",
    ]
    list_editable = ["hourly_price", "is_active"]
    list_filter = ["provider", "is_active"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    filter_horizontal = ["plans"]
    readonly_fields = ["catalog_price"]
    fieldsets = [
        (None, {"fields": ["name", "slug", "description", "is_active", "sort_order", "plans"]}),
        ("Machine", {"fields": ["vram_gb", "fp16_tflops", "memory_bandwidth_gbs"]}),
        (
            "Price",
            {
                "fields": [
                    "hourly_price",
                    "operator_hourly_cost",
                    "markup_percent",
                    "catalog_price",
                ],
                "description": (
                    "With the operator's cost and a markup, the price is worked out from them "
                    "when saved."
                ),
            },
        ),
        ("Provider", {"fields": ["provider", "provider_options"]}),
    ]

    @admin.display(description="SkyPilot's catalog")
    def catalog_price(self, gpu: GpuType) -> str:
        if gpu.pk is None:
            return "Save the type first."
        return catalog_summary(gpu)


def _read_only_except(model, *editable: str) -> list[str]:
    return [f.name for f in model._meta.get_fields() if f.concrete and f.name not in editable]


@admin.register(TrainingJob)
class TrainingJobAdmin(admin.ModelAdmin):
    """Jobs are started, stopped and resumed by services (credits, leases); here they are read."""

    list_display = ["title", "workspace", "task", "model_name", "gpu_type", "state", "created_at"]
    list_filter = ["state", "task", "gpu_type"]
    list_select_related = ["workspace", "gpu_type"]
    search_fields = ["name", "workspace__slug"]
    date_hierarchy = "created_at"
    raw_id_fields = [
        "workspace",
        "project",
        "dataset_version",
        "gpu_type",
        "created_by",
        "base_model",
    ]

    def get_readonly_fields(self, request, obj=None):
        return _read_only_except(TrainingJob, "name")

    def has_add_permission(self, request):
        return False


@admin.register(TrainedModel)
class TrainedModelAdmin(admin.ModelAdmin):
    list_display = ["name", "workspace", "task", "architecture", "imgsz", "created_at"]
    list_filter = ["task", "architecture"]
    list_select_related = ["workspace"]
    search_fields = ["name", "workspace__slug"]
    date_hierarchy = "created_at"
    raw_id_fields = ["workspace", "project", "job", "dataset_version", "created_by"]

    def get_readonly_fields(self, request, obj=None):
        return _read_only_except(TrainedModel, "name")

    def has_add_permission(self, request):
        return False


@admin.register(WorkspaceRecipe)
class WorkspaceRecipeAdmin(admin.ModelAdmin):
    """A workspace's saved recipes. Editing the arguments here skips the checks a sweep's page
    and the training form make, so only the name and description change; what a recipe sets is
    checked again when a job starts with it anyway."""

    list_display = ["name", "workspace", "epochs", "imgsz", "batch", "created_by", "created_at"]
    list_select_related = ["workspace", "created_by"]
    search_fields = ["name", "description", "workspace__slug", "workspace__name"]
    date_hierarchy = "created_at"
    raw_id_fields = ["workspace", "created_by"]

    def get_readonly_fields(self, request, obj=None):
        return _read_only_except(WorkspaceRecipe, "name", "description")

    def has_add_permission(self, request):
        return False
