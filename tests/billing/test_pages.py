import pytest
from django.urls import reverse

from billing.ledger import account_for, credits_grant, hold_capture, hold_place, hold_release
from core.money import MICRO

pytestmark = pytest.mark.django_db


@pytest.fixture
def metered(team, jobs):
    job = jobs.new(name="Birds run")
    hold_place(team.workspace, job, 5 * MICRO)
    hold_capture(job, 1_234_500)
    hold_release(job)
    credits_grant(team.workspace, 3 * MICRO, reason="Conference promo", admin=team.owner)
    return job


@pytest.mark.parametrize("role", ["viewer", "owner"])
def test_billing_page_shows_credits_history_usage_and_job_costs(client, team, metered, role):
    client.force_login(team.user(role))
    response = client.get(reverse("workspace_billing", kwargs={"ws_slug": "acme"}))
    assert response.status_code == 200
    html = response.content.decode()
    assert "21.7655" in html  # 20 + 3 − 1.2345 available
    assert "Conference promo" in html
    assert reverse("job_detail", kwargs={"ws_slug": "acme", "pk": metered.pk}) in html
    assert "Birds run" in html
    assert 'id="billing-usage-data"' in html and "js/billing.js" in html
    assert "<script>" not in html  # CSP: no inline scripts
    assert html.count('data-testid="ledger-entry"') == 5  # signup, hold, capture, release, grant


def test_billing_page_history_is_paginated_newest_first(client, team):
    for i in range(30):
        credits_grant(team.workspace, MICRO, reason=f"grant {i}")
    client.force_login(team.viewer)
    url = reverse("workspace_billing", kwargs={"ws_slug": "acme"})
    first = client.get(url).content.decode()
    assert "grant 29" in first and "grant 0<" not in first
    second = client.get(url, {"page": 2}).content.decode()
    assert "Signup credits" in second


def test_stranger_gets_404(client, team, stranger):
    client.force_login(stranger)
    assert client.get(reverse("workspace_billing", kwargs={"ws_slug": "acme"})).status_code == 404


def test_api_balance_and_ledger(client, team, metered):
    client.force_login(team.viewer)
    balance = client.get("/api/v1/workspaces/acme/billing/balance").json()
    assert balance["available"] == 23 * MICRO - 1_234_500
    assert balance["held"] == 0
    page = client.get("/api/v1/workspaces/acme/billing/ledger").json()
    assert page["count"] == 5
    assert [e["kind"] for e in page["items"]][:2] == ["grant", "release"]
    assert page["items"][2]["amount"] == -1_234_500
    assert page["items"][2]["job_id"] == metered.pk
    # The same under the names the issue gives them.
    assert client.get("/api/v1/billing/balance?workspace=acme").json() == balance
    assert client.get("/api/v1/billing/ledger?workspace=acme").json() == page


def test_api_hides_other_workspaces(client, team, stranger):
    account_for(team.workspace)
    client.force_login(stranger)
    assert client.get("/api/v1/workspaces/acme/billing/ledger").status_code == 404
    assert client.get("/api/v1/billing/balance?workspace=acme").status_code == 404


def test_admin_grant_needs_a_reason(client, team):
    account = account_for(team.workspace)
    team.owner.is_staff = team.owner.is_superuser = True
    team.owner.save()
    client.force_login(team.owner)
    url = reverse("admin:billing_creditaccount_grant", args=[account.pk])
    assert client.post(url, {"credits": "5", "reason": ""}).status_code == 200
    response = client.post(url, {"credits": "5.5", "reason": "Support ticket 42"})
    assert response.status_code == 302
    account.refresh_from_db()
    assert account.balance == 25_500_000
    assert account.entries.first().admin_id == team.owner.pk
    assert (
        client.get(reverse("admin:billing_creditaccount_change", args=[account.pk])).status_code
        == 200
    )
