"""Buying credits: the top-up form's target, the page Stripe sends people back to, and Stripe's
webhook (the one view without CSRF protection: Stripe signs its requests instead)."""

import logging

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from billing import stripe_gateway
from billing.models import PaymentStatus
from billing.payments import payment_fulfil, topup_start, webhook_handle
from core.errors import ServiceError
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)


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
    if payment is None or payment.workspace_id != access.workspace.pk:
        messages.error(request, "That payment is not one of this workspace's.")
    elif payment.status == PaymentStatus.PAID:
        messages.success(request, f"Thank you: {payment.amount // 1_000_000} credits were added.")
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


urlpatterns = [
    path("w/<slug:ws_slug>/billing/topup/", topup_start_view, name="billing_topup"),
    path("w/<slug:ws_slug>/billing/topup/done/", topup_done, name="billing_topup_done"),
    path("billing/stripe/webhook", stripe_webhook, name="stripe_webhook"),
]
