from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from workspaces.models import ApiKey, Invitation, Membership, Project, User, Workspace


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    ordering = ["email"]
    list_display = ["email", "first_name", "last_name", "is_staff", "is_active", "date_joined"]
    list_filter = ["is_staff", "is_superuser", "is_active"]
    search_fields = ["email", "first_name", "last_name"]
    fieldsets = [
        (None, {"fields": ["email", "password"]}),
        ("Personal info", {"fields": ["first_name", "last_name"]}),
        ("Permissions", {"fields": ["is_active", "is_staff", "is_superuser", "groups"]}),
        ("Dates", {"fields": ["last_login", "date_joined"]}),
    ]
    add_fieldsets = [(None, {"classes": ["wide"], "fields": ["email", "password1", "password2"]})]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "is_personal", "plan", "created_by", "created_at"]
    list_filter = ["is_personal", "plan"]
    search_fields = ["name", "slug", "created_by__email"]
    list_select_related = ["plan", "created_by"]
    raw_id_fields = ["created_by"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "workspace", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__email", "workspace__slug"]
    list_select_related = ["user", "workspace"]
    raw_id_fields = ["user", "workspace"]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = [
        "email",
        "workspace",
        "role",
        "created_at",
        "expires_at",
        "accepted_at",
        "revoked_at",
    ]
    list_filter = [
        "role",
        ("accepted_at", admin.EmptyFieldListFilter),
        ("revoked_at", admin.EmptyFieldListFilter),
    ]
    search_fields = ["email", "workspace__slug"]
    list_select_related = ["workspace"]
    raw_id_fields = ["workspace", "invited_by", "accepted_by"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "workspace", "created_by", "created_at", "updated_at"]
    search_fields = ["name", "workspace__slug"]
    list_select_related = ["workspace", "created_by"]
    raw_id_fields = ["workspace", "created_by"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "prefix",
        "workspace",
        "scopes",
        "created_by",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    list_filter = [
        ("revoked_at", admin.EmptyFieldListFilter),
        ("expires_at", admin.EmptyFieldListFilter),
    ]
    search_fields = ["name", "prefix", "workspace__slug"]
    list_select_related = ["workspace", "created_by"]
    raw_id_fields = ["workspace", "created_by"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]
