"""Every call to Stripe lives here, and nowhere else: tests replace Stripe's servers at this
module's edge (checkout_create, checkout_retrieve), never the ledger or the database.

Without STRIPE_SECRET_KEY and STRIPE_WEBHOOK_SECRET top-ups are off; admins grant credits."""

from dataclasses import dataclass

import stripe
from django.conf import settings

WEBHOOK_TOLERANCE_SECONDS = 300


class GatewayError(Exception):
    """Stripe refused or could not be reached; the message can be shown."""


class SignatureError(Exception):
    """A webhook whose signature does not verify (wrong secret, tampered body, too old)."""


@dataclass(frozen=True)
class Checkout:
    session_id: str
    url: str


def enabled() -> bool:
    return bool(settings.STRIPE_SECRET_KEY and settings.STRIPE_WEBHOOK_SECRET)


def checkout_create(
    *, amount_cents: int, currency: str, description: str, reference: str, success_url: str,
    cancel_url: str,
) -> Checkout:  # fmt: skip
    """A Stripe Checkout session for one payment of `amount_cents`."""
    try:
        session = stripe.checkout.Session.create(
            api_key=settings.STRIPE_SECRET_KEY,
            mode="payment",
            line_items=[
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": currency,
                        "unit_amount": amount_cents,
                        "product_data": {"name": description},
                    },
                }
            ],
            client_reference_id=reference,
            metadata={"kestrel_payment": reference},
            success_url=success_url,
            cancel_url=cancel_url,
        )
    except stripe.StripeError as e:
        raise GatewayError(f"Stripe refused the payment: {e.user_message or e}") from None
    return Checkout(session_id=session["id"], url=session["url"])


def checkout_retrieve(session_id: str) -> dict:
    """The session as Stripe knows it now: {"id", "payment_status", "amount_total", ...}."""
    try:
        session = stripe.checkout.Session.retrieve(session_id, api_key=settings.STRIPE_SECRET_KEY)
    except stripe.StripeError as e:
        raise GatewayError(f"Stripe could not be asked about the payment: {e}") from None
    return {
        "id": session["id"],
        "payment_status": session["payment_status"],
        "amount_total": session["amount_total"],
        "currency": session["currency"],
    }


def webhook_event(payload: bytes, signature: str) -> dict:
    """The event Stripe sent, verified on the raw body (signature, secret, 300 s tolerance)."""
    try:
        event = stripe.Webhook.construct_event(
            payload,
            signature,
            settings.STRIPE_WEBHOOK_SECRET,
            tolerance=WEBHOOK_TOLERANCE_SECONDS,
        )
    except (stripe.SignatureVerificationError, ValueError) as e:
        raise SignatureError(str(e)) from None
    return event.to_dict() if hasattr(event, "to_dict") else dict(event)
