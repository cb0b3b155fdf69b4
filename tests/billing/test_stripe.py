"""Stripe top-ups: Stripe's servers are replaced at billing.stripe_gateway's edge (the Checkout
calls); webhooks are signed exactly as Stripe signs them and go through the real view, ledger
and database."""

import hashlib
import hmac
import json
import threading
import time

import pytest
from django.db import connection
from django.test import Client, override_settings

from billing import stripe_gateway
from billing.ledger import account_for
from billing.models import EntryKind, LedgerEntry, Payment, PaymentStatus, StripeEvent
from core.money import MICRO

SECRET = "whsec_test_secret"
KEYS = override_settings(STRIPE_SECRET_KEY="sk_test_x", STRIPE_WEBHOOK_SECRET=SECRET)


def signed(payload: bytes, *, secret: str = SECRET, at: int | None = None) -> str:
    at = int(time.time()) if at is None else at
    mac = hmac.new(secret.encode(), f"{at}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


def event(session_id: str, amount_cents: int, *, event_id: str = "evt_1", paid=True) -> bytes:
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": "checkout.session.completed",
            "data": {
                "object": {
                    "id": session_id,
                    "object": "checkout.session",
                    "payment_status": "paid" if paid else "unpaid",
                    "amount_total": amount_cents,
                    "currency": "usd",
                }
            },
        }
    ).encode()


def deliver(client, payload: bytes, signature: str):
    return client.post(
        "/billing/stripe/webhook",
        data=payload,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=signature,
    )


@pytest.fixture
def stripe_edge(monkeypatch):
    """Stripe's servers: Checkout sessions remembered here, in memory."""
    sessions: dict[str, dict] = {}

    def create(**kw):
        session_id = f"cs_test_{len(sessions) + 1}"
        sessions[session_id] = {"id": session_id, "payment_status": "unpaid",
                                "amount_total": kw["amount_cents"], "currency": "usd"}  # fmt: skip
        return stripe_gateway.Checkout(session_id=session_id, url=f"https://pay.test/{session_id}")

    monkeypatch.setattr(stripe_gateway, "checkout_create", create)
    monkeypatch.setattr(stripe_gateway, "checkout_retrieve", lambda sid: dict(sessions[sid]))
    return sessions


def started_topup(client, team, credits="25"):
    client.force_login(team.owner)
    response = client.post("/w/acme/billing/topup/", {"credits": credits})
    payment = Payment.objects.get()
    return response, payment


def purchases(team) -> list[LedgerEntry]:
    return list(LedgerEntry.objects.filter(account=account_for(team.workspace), kind="purchase"))


pytestmark = pytest.mark.django_db(transaction=True)


@KEYS
def test_a_topup_goes_to_checkout_and_the_webhook_credits_it_once(client, team, stripe_edge):
    before = account_for(team.workspace).balance
    response, payment = started_topup(client, team)
    assert response.status_code == 302 and response["Location"].startswith("https://pay.test/")
    assert payment.status == PaymentStatus.PENDING and payment.amount == 25 * MICRO
    response = deliver(client, event(payment.stripe_session_id, 2500),
                       signed(event(payment.stripe_session_id, 2500)))  # fmt: skip
    assert response.status_code == 200
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.PAID
    assert account_for(team.workspace).balance == before + 25 * MICRO
    [entry] = purchases(team)
    assert entry.payment_ref == f"stripe:{payment.stripe_session_id}"


@KEYS
@pytest.mark.parametrize(
    "forge",
    [
        lambda p: signed(p, secret="whsec_wrong"),
        lambda p: signed(p.replace(b"2500", b"9999")),  # signature of another body
        lambda p: signed(p, at=int(time.time()) - 301),  # older than the 300 s tolerance
        lambda p: "t=1,v1=deadbeef",
        lambda p: "",
    ],
)
def test_forged_or_stale_webhooks_are_refused(client, team, stripe_edge, forge):
    _, payment = started_topup(client, team)
    payload = event(payment.stripe_session_id, 2500)
    assert deliver(client, payload, forge(payload)).status_code == 400
    assert not purchases(team) and not StripeEvent.objects.exists()


@KEYS
def test_five_concurrent_replays_credit_once(team, stripe_edge):
    _, payment = started_topup(Client(), team)
    payload = event(payment.stripe_session_id, 2500)
    signature = signed(payload)
    start = threading.Barrier(5)
    codes = []

    def replay():
        start.wait()
        codes.append(deliver(Client(), payload, signature).status_code)
        connection.close()

    threads = [threading.Thread(target=replay) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert codes == [200] * 5
    assert len(purchases(team)) == 1 and StripeEvent.objects.count() == 1


@KEYS
def test_the_success_page_first_then_the_webhook_credit_once(client, team, stripe_edge):
    _, payment = started_topup(client, team)
    stripe_edge[payment.stripe_session_id]["payment_status"] = "paid"  # Stripe took the money
    response = client.get(f"/w/acme/billing/topup/done/?session_id={payment.stripe_session_id}")
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "25 credits were added" in page
    payload = event(payment.stripe_session_id, 2500, event_id="evt_late")
    assert deliver(client, payload, signed(payload)).status_code == 200
    assert len(purchases(team)) == 1


@KEYS
def test_out_of_order_and_unpaid_events_change_nothing(client, team, stripe_edge):
    _, payment = started_topup(client, team)
    unpaid = event(payment.stripe_session_id, 2500, event_id="evt_unpaid", paid=False)
    assert deliver(client, unpaid, signed(unpaid)).status_code == 200
    assert not purchases(team)
    wrong_amount = event(payment.stripe_session_id, 100, event_id="evt_odd")
    assert deliver(client, wrong_amount, signed(wrong_amount)).status_code == 200
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.DISPUTED and not purchases(team)
    unknown = event("cs_test_not_ours", 2500, event_id="evt_other")
    assert deliver(client, unknown, signed(unknown)).status_code == 200
    assert not purchases(team)


@KEYS
@pytest.mark.parametrize("credits", ["0", "-5", "4", "10001", "1e3", "abc", "99999999"])
def test_bad_amounts_are_refused(client, team, stripe_edge, credits):
    client.force_login(team.owner)
    response = client.post("/w/acme/billing/topup/", {"credits": credits})
    assert response.status_code == 302 and response["Location"] == "/w/acme/billing/"
    assert not Payment.objects.exists()


def test_without_keys_topups_are_off(client, team):
    client.force_login(team.owner)
    page = client.get("/w/acme/billing/").content.decode()
    assert "Top-ups are off on this server" in page
    client.post("/w/acme/billing/topup/", {"credits": "25"})
    assert not Payment.objects.exists()


@KEYS
def test_only_billing_managers_buy_and_another_workspace_cannot_claim_a_payment(
    client, team, stranger, stripe_edge
):
    client.force_login(team.editor)
    assert client.post("/w/acme/billing/topup/", {"credits": "25"}).status_code == 403
    _, payment = started_topup(client, team)
    stripe_edge[payment.stripe_session_id]["payment_status"] = "paid"
    client.force_login(stranger)
    response = client.get(
        f"/w/elsewhere/billing/topup/done/?session_id={payment.stripe_session_id}"
    )
    assert response.status_code == 302
    # Fulfilled for the workspace that paid, never for the one that asked.
    assert (
        purchases(team)
        and not LedgerEntry.objects.filter(
            kind=EntryKind.PURCHASE, account__workspace__slug="elsewhere"
        ).exists()
    )
