"""The workspace's billing page (plan, credits, usage, history) and buying credits: the top-up
form's target, the page Stripe sends people back to, and Stripe's webhook (the one view without
CSRF protection: Stripe signs its requests instead)."""

import logging

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from billing import ledger, selectors, stripe_gateway
from billing.models import PaymentStatus
from billing.payments import PRESET_CREDITS, payment_fulfil, topup_start, webhook_handle
from core.errors import ServiceError
from core.http import page_of
from core.money import MICRO
from core.pages import page_parts
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)


@workspace_view(Perm.READ)
def workspace_billing(request, access: WorkspaceAccess) -> HttpResponse:
    """Every member sees the credits (they decide whether training can start); buying them
    needs MANAGE_BILLING."""
    account = ledger.account_for(access.workspace)
    usage = selectors.usage_per_day(account=account)
    return render(
        request,
        "billing/workspace_billing.html",
        {
            "access": access,
            "plan": access.workspace.plan,
            "seats_used": workspace_selectors.workspace_seats_used(workspace=access.workspace),
            "account": account,
            "signup_grant": selectors.signup_grant_for_account(account=account),
            "entries": page_of(request, selectors.ledger_entry_list(account=account)),
            "usage": usage,
            "usage_chart": {
                "labels": [row["day"].isoformat() for row in usage],
                "micro": [row["spent"] for row in usage],
            },
            "topups_enabled": stripe_gateway.enabled(),
            "can_buy": access.can(Perm.MANAGE_BILLING),
            "presets": PRESET_CREDITS,
            # the cost per training job (training) and the inference calls (deploy)
            **page_parts("billing_page", access=access, account=account),
        },
    )


def _credits_asked(request: HttpRequest) -> int | None:
    raw = (request.POST.get("custom") or request.POST.get("credits") or "").strip()
    return int(raw) if raw.isdigit() and len(raw) < 7 else None


@workspace_view(Perm.MANAGE_BILLING)
@require_POST
def topup_start_view(request: HttpRequest, access: WorkspaceAccess) -> HttpResponse:
    back = redirect("workspace_billing", ws_slug=access.workspace.slug)
    credits = _credits_asked(request)
    if credits is None:
        messages.error(request, "Say how many credits to buy, as a whole number.")
        return back
    try:
        _, url = topup_start(access=access, credits=credits, site_url=settings.SITE_URL)
    except (ServiceError, stripe_gateway.GatewayError) as e:
        messages.error(request, str(e))
        return back
    return redirect(url)  # Stripe Checkout


@workspace_view(Perm.READ)
@require_GET
def topup_done(request: HttpRequest, access: WorkspaceAccess) -> HttpResponse:
    """Stripe sends the person back here; if the webhook has not arrived yet, this fulfils."""
    back = redirect("workspace_billing", ws_slug=access.workspace.slug)
    session_id = request.GET.get("session_id", "")[:255]
    try:
        payment = payment_fulfil(session_id=session_id) if session_id else None
    except stripe_gateway.GatewayError as e:
        messages.error(request, f"{e} The credits arrive as soon as Stripe confirms.")
        return back
    if payment is None or not access.owns(payment):
        messages.error(request, "That payment is not one of this workspace's.")
    elif payment.status == PaymentStatus.PAID:
        messages.success(request, f"Thank you: {payment.amount // MICRO} credits were added.")
    else:
        messages.info(request, "Stripe has not confirmed the payment yet; the credits follow.")
    return back


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    try:
        outcome = webhook_handle(
            payload=request.body, signature=request.headers.get("Stripe-Signature", "")
        )
    except stripe_gateway.SignatureError as e:
        logger.warning("Stripe webhook refused: %s", e)
        return HttpResponseBadRequest("The signature does not verify.")
    logger.info("Stripe webhook: %s", outcome)
    return HttpResponse("ok")
