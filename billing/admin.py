from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from billing.ledger import MAX_AMOUNT, credits_adjust, credits_format, credits_grant
from billing.models import CreditAccount, LedgerEntry, Plan
from core.errors import ServiceError
from core.money import to_micro


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "slug",
        "max_seats",
        "signup_credits",
        "monthly_credits",
        "max_concurrent_jobs",
        "storage_quota_bytes",
        "max_deployments",
        "predict_requests_per_minute",
        "is_default",
        "sort_order",
    ]
    list_editable = ["max_seats", "sort_order"]
    prepopulated_fields = {"slug": ["name"]}


class CreditsForm(forms.Form):
    credits = forms.DecimalField(
        max_digits=16,
        decimal_places=6,
        help_text="Credits (1 credit = 1 US dollar). Negative: an adjustment that takes credits.",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=True)

    def clean_credits(self) -> int:
        micro = to_micro(self.cleaned_data["credits"])
        if micro == 0 or abs(micro) > MAX_AMOUNT:
            raise forms.ValidationError("Give a non-zero amount of at most a billion credits.")
        return micro


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(CreditAccount)
class CreditAccountAdmin(ReadOnlyAdmin):
    list_display = ["workspace_slug", "workspace", "balance_credits", "held_credits", "updated_at"]
    search_fields = ["workspace_slug", "workspace__name"]
    list_select_related = ["workspace"]
    readonly_fields = ["workspace", "workspace_slug", "balance", "held", "updated_at"]

    @admin.display(description="balance (credits)")
    def balance_credits(self, obj: CreditAccount) -> str:
        return credits_format(obj.balance)

    @admin.display(description="held (credits)")
    def held_credits(self, obj: CreditAccount) -> str:
        return credits_format(obj.held)

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_urls(self):
        grant = self.admin_site.admin_view(self.grant_view)
        return [
            path("<int:pk>/grant/", grant, name="billing_creditaccount_grant"),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = {
            "grant_url": reverse("admin:billing_creditaccount_grant", args=[object_id]),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, extra)

    def grant_view(self, request, pk: int):
        """Grant (positive) or take (negative, an adjustment) credits, always with a reason."""
        if not request.user.is_superuser:
            raise PermissionDenied("Only superusers move credits.")
        account = CreditAccount.objects.select_related("workspace").get(pk=pk)
        form = CreditsForm(request.POST or None)
        if request.method == "POST" and form.is_valid() and account.workspace is not None:
            micro, reason = form.cleaned_data["credits"], form.cleaned_data["reason"]
            try:
                if micro > 0:
                    credits_grant(account.workspace, micro, reason=reason, admin=request.user)
                else:
                    credits_adjust(account.workspace, micro, reason=reason, admin=request.user)
            except ServiceError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"{credits_format(micro)} credits recorded.")
                return redirect("admin:billing_creditaccount_change", account.pk)
        return TemplateResponse(
            request,
            "admin/billing/grant.html",
            {
                **self.admin_site.each_context(request),
                "title": f"Grant credits to {account.workspace_slug}",
                "account": account,
                "form": form,
                "opts": self.model._meta,
            },
        )


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "account", "kind", "amount", "balance_after", "held_after"]
    list_filter = ["kind"]
    search_fields = ["account__workspace_slug", "payment_ref", "reason"]
    list_select_related = ["account"]
    readonly_fields = [f.name for f in LedgerEntry._meta.fields]

    def get_actions(self, request):
        return {}  # no bulk delete: the ledger is append-only
