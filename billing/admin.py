from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import path, reverse

from billing.ledger import MAX_AMOUNT, credits_adjust, credits_format, credits_grant
from billing.models import CreditAccount, LedgerEntry, Plan, SignupGrant
from core.errors import ServiceError
from core.money import from_micro, to_micro


class MicroCreditsField(forms.DecimalField):
    """Typed and shown as credits (5.00), stored as micro-credits, as the app shows them."""

    def __init__(self, **kwargs):
        super().__init__(max_digits=16, decimal_places=6, min_value=0, **kwargs)

    def prepare_value(self, value):
        if isinstance(value, int) and not isinstance(value, bool):  # the stored micro-credits
            credits = from_micro(value)
            return credits.quantize(Decimal("0.01")) if credits == round(credits, 2) else credits
        return value  # what was typed, shown again with its error

    def clean(self, value):
        credits = super().clean(value)
        return None if credits is None else to_micro(credits)


class PlanForm(forms.ModelForm):
    signup_credits = MicroCreditsField(
        label="Sign-up credits",
        help_text="Credits granted once per person, into their personal workspace, when they "
        "confirm their address. A new team gets none.",
    )
    monthly_credits = MicroCreditsField(
        label="Monthly credits", help_text="Credits granted at the start of each month."
    )

    class Meta:
        model = Plan
        fields = [f.name for f in Plan._meta.fields if f.editable and not f.primary_key]


def _credits_column(field: str, description: str):
    @admin.display(description=description, ordering=field)
    def column(self, obj) -> str:
        value = getattr(obj, field)
        return "" if value is None else credits_format(value)

    return column


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    form = PlanForm
    list_display = [
        "name",
        "slug",
        "max_seats",
        "signup_credits_shown",
        "monthly_credits_shown",
        "max_concurrent_jobs",
        "storage_quota_shown",
        "max_deployments",
        "predict_requests_per_minute",
        "is_default",
        "sort_order",
    ]
    list_editable = ["max_seats", "sort_order"]
    prepopulated_fields = {"slug": ["name"]}
    signup_credits_shown = _credits_column("signup_credits", "sign-up credits")
    monthly_credits_shown = _credits_column("monthly_credits", "monthly credits")

    @admin.display(description="storage quota", ordering="storage_quota_bytes")
    def storage_quota_shown(self, obj: Plan) -> str:
        return filesizeformat(obj.storage_quota_bytes)  # as the billing page shows it


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
    fields = readonly_fields = [
        "workspace",
        "workspace_slug",
        "balance_credits",
        "held_credits",
        "available_credits",
        "updated_at",
    ]
    balance_credits = _credits_column("balance", "balance (credits)")
    held_credits = _credits_column("held", "held (credits)")

    @admin.display(description="available (credits)")
    def available_credits(self, obj: CreditAccount) -> str:
        return credits_format(obj.available)

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


_MICRO_FIELDS = {"amount", "hold_delta", "balance_after", "held_after"}


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "account",
        "kind",
        "amount_credits",
        "balance_after_credits",
        "held_after_credits",
        "reason",
    ]
    list_filter = ["kind"]
    search_fields = ["account__workspace_slug", "payment_ref", "reason"]
    list_select_related = ["account"]
    # Each amount as credits, where the stored micro-credits would read as 5000000.
    fields = readonly_fields = [
        f"{f.name}_credits" if f.name in _MICRO_FIELDS else f.name for f in LedgerEntry._meta.fields
    ]
    amount_credits = _credits_column("amount", "amount (credits)")
    hold_delta_credits = _credits_column("hold_delta", "hold change (credits)")
    balance_after_credits = _credits_column("balance_after", "balance after (credits)")
    held_after_credits = _credits_column("held_after", "held after (credits)")

    def get_actions(self, request):
        return {}  # no bulk delete: the ledger is append-only


@admin.register(SignupGrant)
class SignupGrantAdmin(ReadOnlyAdmin):
    """Who had their sign-up credits (once per person); the grant itself is on the ledger."""

    list_display = ["email", "user", "amount_credits", "created_at"]
    search_fields = ["email"]
    list_select_related = ["user", "entry"]
    fields = readonly_fields = ["email", "user", "entry", "created_at"]

    @admin.display(description="credits")
    def amount_credits(self, obj: SignupGrant) -> str:
        return credits_format(obj.entry.amount)
