from django.contrib import admin

from billing.models import Plan


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "max_seats", "is_default", "sort_order"]
    list_editable = ["max_seats", "sort_order"]
    prepopulated_fields = {"slug": ["name"]}
