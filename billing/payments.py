"""Credit top-ups through Stripe Checkout, fulfilled exactly once.

A top-up is a Payment row (pending) and a Checkout session. Whichever arrives first — the
webhook (checkout.session.completed) or the person coming back to the success page — fulfils
it: under the Payment's row lock, a pending payment that Stripe says is paid becomes paid and
its credits are purchased in the ledger (itself idempotent per payment reference). Each webhook
event id is recorded once; a replay is acknowledged and ignored.
"""

import logging

from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from billing import stripe_gateway
from billing.ledger import credits_purchase
from billing.models import Payment, PaymentStatus, StripeEvent
from core.errors import ServiceError
from core.money import to_micro
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

PRESET_CREDITS = (10, 25, 50, 100)
FULFILLING = ("checkout.session.completed", "checkout.session.async_payment_succeeded")
MIN_CREDITS, MAX_CREDITS = 5, 10_000


def topup_start(*, access: WorkspaceAccess, credits: int, site_url: str) -> tuple[Payment, str]:
    """A pending payment and the Stripe Checkout URL to send the person to."""
    access.require(Perm.MANAGE_BILLING)
    if not stripe_gateway.enabled():
        raise ServiceError("Top-ups are off on this server; an administrator grants credits.")
    if not isinstance(credits, int) or not MIN_CREDITS <= credits <= MAX_CREDITS:
        raise ServiceError(f"Buy between {MIN_CREDITS} and {MAX_CREDITS:,} credits at a time.")
    payment = Payment.objects.create(
        workspace=access.workspace,
        amount=to_micro(credits),
        amount_cents=credits * 100,  # 1 credit = 1 US dollar
        created_by=access.user,
    )
    base = site_url.rstrip("/")
    slug = access.workspace.slug
    done = reverse("billing_topup_done", kwargs={"ws_slug": slug})
    checkout = stripe_gateway.checkout_create(
        amount_cents=payment.amount_cents,
        currency="usd",
        description=f"{credits} Kestrel credits for {access.workspace.name}",
        reference=str(payment.pk),
        success_url=f"{base}{done}?session_id={{CHECKOUT_SESSION_ID}}",
        cancel_url=f"{base}{reverse('workspace_billing', kwargs={'ws_slug': slug})}",
    )
    payment.stripe_session_id = checkout.session_id
    payment.save(update_fields=["stripe_session_id"])
    return payment, checkout.url


def payment_fulfil(*, session_id: str, session: dict | None = None) -> Payment | None:
    """Credit a paid session's payment once. `session`: what the webhook carried; otherwise
    Stripe is asked. Returns the payment (None for a session Kestrel never made)."""
    with transaction.atomic():
        payment = Payment.objects.select_for_update().filter(stripe_session_id=session_id).first()
        if payment is None or payment.status == PaymentStatus.PAID:
            return payment
        session = session or stripe_gateway.checkout_retrieve(session_id)
        if session.get("payment_status") != "paid":
            return payment
        if session.get("amount_total") != payment.amount_cents:
            payment.status = PaymentStatus.DISPUTED
            payment.save(update_fields=["status"])
            logger.error("payment %s: Stripe charged %s, expected %s", payment.pk,
                         session.get("amount_total"), payment.amount_cents)  # fmt: skip
            return payment
        entry = credits_purchase(
            payment.workspace, payment.amount, payment_ref=f"stripe:{session_id}"
        )
        payment.status = PaymentStatus.PAID
        payment.paid_at = timezone.now()
        payment.ledger_entry = entry
        payment.save(update_fields=["status", "paid_at", "ledger_entry"])
    return payment


def webhook_handle(*, payload: bytes, signature: str) -> str:
    """Verify and apply one webhook delivery; returns what happened (for the log)."""
    event = stripe_gateway.webhook_event(payload, signature)  # raises SignatureError
    kind = event.get("type", "")
    # The event id and its effect commit together: a failure leaves neither, and Stripe's retry
    # is then applied; a replay (even five at once) finds the id taken and changes nothing.
    try:
        with transaction.atomic():
            StripeEvent.objects.create(event_id=event["id"], kind=kind[:100])
            if kind in FULFILLING:
                session = event["data"]["object"]
                payment = payment_fulfil(session_id=session["id"], session=session)
                return f"event {event['id']}: payment {payment.pk if payment else 'unknown'}"
    except IntegrityError:
        return f"event {event['id']} already handled"
    return f"event {event['id']} ({kind}) recorded"
