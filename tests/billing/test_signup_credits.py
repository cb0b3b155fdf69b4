"""Sign-up credits once per confirmed person, not per workspace (issue 33, item 7): signing up
opens an empty account, confirming the address grants the plan's credits into the personal
workspace, a new team starts with none, and the database refuses a second grant to the same
person. An administrator grants a team credits (admin page or `manage.py credits_grant`), and
the admin shows every amount as credits, never as micro-credits."""

import io
import re
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.template.defaultfilters import filesizeformat
from django.test import Client
from django.urls import reverse

from billing.ledger import account_for, credits_grant, signup_credits_grant
from billing.models import CreditAccount, EntryKind, LedgerEntry, Plan, SignupGrant
from core.money import MICRO
from tests.workspaces.factories import PASSWORD, UserFactory, WorkspaceFactory
from workspaces.models import User, Workspace
from workspaces.services.invitations import user_address_confirm
from workspaces.services.workspaces import (
    user_signup_credits_grant,
    workspace_create_personal,
    workspace_create_team,
)

pytestmark = pytest.mark.django_db

CONFIRM_LINK = re.compile(r"https?://[^\s]+(/accounts/confirm-email/[^\s]+/)")


def _credits_of(user: User) -> int:
    """Every credit in the workspaces the person created."""
    accounts = CreditAccount.objects.filter(workspace__created_by=user)
    return sum(a.balance for a in accounts)


def _sign_up(client: Client, email: str, mailoutbox) -> str:
    """Sign up through allauth; the path of the confirmation link it mailed."""
    response = client.post(
        reverse("account_signup"), {"email": email, "password1": PASSWORD, "password2": PASSWORD}
    )
    assert response.status_code == 302
    return CONFIRM_LINK.search(mailoutbox[-1].body).group(1)


def test_confirming_the_address_grants_the_credits_once_and_teams_mint_none(
    client, plans, mailoutbox
):
    link = _sign_up(client, "fresh@example.com", mailoutbox)
    user = User.objects.get(email="fresh@example.com")
    personal = Workspace.objects.get(created_by=user, is_personal=True)
    # Signed up, not yet confirmed: the account is open and empty.
    assert account_for(personal).balance == 0

    assert client.post(link).status_code == 302  # the confirmation link, as the mail gives it
    grant = LedgerEntry.objects.get(account__workspace=personal)
    assert (grant.kind, grant.amount) == (EntryKind.GRANT, 5 * MICRO)
    assert SignupGrant.objects.get(user=user).entry == grant

    page = client.get(reverse("workspace_billing", kwargs={"ws_slug": personal.slug}))
    said = page.content.decode()
    assert "5.00, granted once to you when you confirmed your address" in said

    # Three teams later the person still holds 5.00 in all: creating a team mints nothing.
    for name in ("Birds", "Bees", "Boats"):
        assert client.post(reverse("workspace_create"), {"name": name}).status_code == 302
    assert _credits_of(user) == 5 * MICRO
    team = Workspace.objects.get(name="Birds")
    assert account_for(team).balance == 0 and not LedgerEntry.objects.filter(
        account__workspace=team
    )
    page = client.get(reverse("workspace_billing", kwargs={"ws_slug": team.slug}))
    assert "None: sign-up credits come once per person" in page.content.decode()


def test_a_second_confirmation_or_address_grants_nothing_more(plans):
    user = UserFactory(email="ada@example.com")
    assert user_signup_credits_grant(user=user)
    assert not user_signup_credits_grant(user=user)  # the link opened twice
    user.email = "ada@elsewhere.test"  # another address of hers, confirmed later
    user.save(update_fields=["email"])
    assert not user_signup_credits_grant(user=user)
    assert _credits_of(user) == 5 * MICRO


def test_the_same_address_on_a_new_account_gets_none(plans):
    first = UserFactory(email="Grace@Example.com")
    user_signup_credits_grant(user=first)
    first.delete()  # the account goes; the record of the grant stays, with its address
    again = UserFactory(email="grace@example.com")
    assert not user_signup_credits_grant(user=again)
    assert _credits_of(again) == 0
    assert SignupGrant.objects.get().user is None


def test_the_database_refuses_a_second_grant_to_a_person(plans):
    user = UserFactory()
    personal = workspace_create_personal(user=user)
    entry = signup_credits_grant(user=user, workspace=personal)
    other = credits_grant(personal, MICRO, reason="a goodwill grant")
    with pytest.raises(IntegrityError), transaction.atomic():
        SignupGrant.objects.create(user=user, email="another@example.com", entry=other)
    with pytest.raises(IntegrityError), transaction.atomic():
        SignupGrant.objects.create(user=UserFactory(), email=user.email.lower(), entry=other)
    assert list(SignupGrant.objects.values_list("entry", flat=True)) == [entry.pk]


def test_the_seeded_administrator_is_a_confirmed_person(plans):
    admin = User.objects.create_superuser(email="admin@example.com", password=PASSWORD)
    user_address_confirm(user=admin)  # seed_demo's operator path
    user_address_confirm(user=admin)  # seed_demo run again
    personal = Workspace.objects.get(created_by=admin, is_personal=True)
    assert account_for(personal).balance == 5 * MICRO
    assert _credits_of(admin) == 5 * MICRO


def test_a_factory_workspace_keeps_its_credits(plans):
    # Tests' workspaces (and ones made before accounts) open with the plan's credits, as before.
    workspace = WorkspaceFactory()
    assert account_for(workspace).balance == workspace.plan.signup_credits == 5 * MICRO


def test_an_operator_grants_a_new_team_credits_with_a_reason(plans):
    team = workspace_create_team(user=UserFactory(), name="Harbour")
    out = io.StringIO()
    call_command("credits_grant", team.slug, "12.5", reason="Pilot project", stdout=out)
    assert "Granted 12.50 credits to harbour; 12.50 available." in out.getvalue()
    entry = LedgerEntry.objects.get(account__workspace=team)
    assert (entry.kind, entry.amount, entry.reason) == (
        EntryKind.GRANT,
        12_500_000,
        "Pilot project",
    )
    with pytest.raises(CommandError, match="No workspace 'nowhere'"):
        call_command("credits_grant", "nowhere", "1", reason="x")
    with pytest.raises(CommandError, match="'lots' is not a number of credits"):
        call_command("credits_grant", team.slug, "lots", reason="x")
    with pytest.raises(CommandError, match="more than zero"):
        call_command("credits_grant", team.slug, "-3", reason="x")
    with pytest.raises(CommandError, match="Give a reason"):
        call_command("credits_grant", team.slug, "3", reason=" ")
    assert LedgerEntry.objects.filter(account__workspace=team).count() == 1


def test_the_admin_shows_credits_not_micro_credits(plans):
    admin = User.objects.create_superuser(email="root@example.com", password=PASSWORD)
    client = Client()
    client.force_login(admin)
    team = workspace_create_team(user=admin, name="Harbour")
    credits_grant(team, 1_234_500_000, reason="Pilot", admin=admin)
    account = account_for(team)
    entry = LedgerEntry.objects.get(account=account)
    pages = {
        "accounts": reverse("admin:billing_creditaccount_changelist"),
        "account": reverse("admin:billing_creditaccount_change", args=[account.pk]),
        "entries": reverse("admin:billing_ledgerentry_changelist"),
        "entry": reverse("admin:billing_ledgerentry_change", args=[entry.pk]),
    }
    for name, url in pages.items():
        page = client.get(url)
        assert page.status_code == 200, name
        html = page.content.decode()
        assert "1,234.50" in html, name
        assert "1234500000" not in html, name

    plans_page = client.get(reverse("admin:billing_plan_changelist")).content.decode()
    assert 'class="field-signup_credits_shown">5.00<' in plans_page
    assert ">5000000<" not in plans_page
    free = Plan.objects.get(slug="free")
    quota = filesizeformat(free.storage_quota_bytes)  # as the billing page shows it
    assert f'class="field-storage_quota_shown">{quota}<' in plans_page
    assert str(free.storage_quota_bytes) not in plans_page
    url = reverse("admin:billing_plan_change", args=[free.pk])
    form = client.get(url).content.decode()
    assert 'name="signup_credits" value="5.00"' in form and "5000000" not in form
    data = {
        f.name: getattr(free, f.attname)
        for f in Plan._meta.fields
        if f.editable and not f.primary_key
    }
    data.update(signup_credits="7.5", monthly_credits="0", is_default="on")
    assert client.post(url, data).status_code == 302
    free.refresh_from_db()
    assert free.signup_credits == 7_500_000
    data.update(signup_credits="-1")
    assert client.post(url, data).status_code == 200  # refused, with the form again
    free.refresh_from_db()
    assert free.signup_credits == Decimal("7.5") * MICRO
