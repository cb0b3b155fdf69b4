"""A workspace's account opens when the workspace is created, in the same transaction, and
empty: sign-up credits are a confirmed person's, once (issue 33; tests/billing/
test_signup_credits.py). A workspace made before that gets the plan's signup credits when its
account is first read, dated at its creation (issue 16, item 2)."""

from datetime import timedelta

import pytest
from django.db import DatabaseError, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing.ledger import account_for
from billing.models import CreditAccount, EntryKind, LedgerEntry
from core.money import MICRO
from tests.workspaces.factories import PASSWORD, UserFactory, WorkspaceFactory
from workspaces.models import Workspace
from workspaces.services.workspaces import workspace_create_team

pytestmark = pytest.mark.django_db


def _grant(workspace: Workspace) -> LedgerEntry:
    return LedgerEntry.objects.get(account__workspace=workspace, kind=EntryKind.GRANT)


def test_signing_up_opens_an_empty_account_with_the_personal_workspace(client, plans):
    response = client.post(
        reverse("account_signup"),
        {"email": "fresh@example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert response.status_code == 302
    workspace = Workspace.objects.get(created_by__email="fresh@example.com", is_personal=True)
    # Open, and empty until the address is confirmed.
    assert CreditAccount.objects.get(workspace=workspace).balance == 0
    assert not LedgerEntry.objects.filter(account__workspace=workspace).exists()


def test_a_new_team_workspace_opens_its_account_empty_and_keeps_it_so(plans):
    user = UserFactory()
    owner = Client()
    owner.force_login(user)
    response = owner.post(reverse("workspace_create"), {"name": "Kestrel Birds"})
    assert response.status_code == 302
    workspace = Workspace.objects.get(name="Kestrel Birds")
    assert CreditAccount.objects.get(workspace=workspace).balance == 0

    page = owner.get(reverse("workspace_billing", kwargs={"ws_slug": workspace.slug}))
    assert page.status_code == 200
    # Reading it grants nothing: the empty account is not taken for one made before accounts.
    assert not LedgerEntry.objects.filter(account__workspace=workspace).exists()


def test_a_workspace_whose_creation_fails_leaves_no_credits_behind(plans):
    user = UserFactory()
    with pytest.raises(DatabaseError), transaction.atomic():
        workspace_create_team(user=user, name="Short lived")
        raise DatabaseError("the rest of the request failed")
    assert not Workspace.objects.filter(name="Short lived").exists()
    assert not CreditAccount.objects.exists() and not LedgerEntry.objects.exists()


def test_an_older_workspace_without_an_account_is_granted_as_of_its_creation(team, client):
    created = timezone.now() - timedelta(days=40)
    Workspace.objects.filter(pk=team.workspace.pk).update(created_at=created)
    assert not CreditAccount.objects.filter(workspace=team.workspace).exists()

    client.force_login(team.viewer)
    page = client.get(reverse("workspace_billing", kwargs={"ws_slug": "acme"}))
    assert page.status_code == 200
    grant = _grant(team.workspace)
    assert grant.created_at == created  # not the moment the page was first opened
    assert grant.amount == 20 * MICRO  # the Pro plan's
    assert timezone.localtime(created).strftime("%Y-%m-%d %H:%M") in page.content.decode()
    # And once only.
    account_for(Workspace.objects.get(pk=team.workspace.pk))
    assert LedgerEntry.objects.filter(account__workspace=team.workspace).count() == 1


def test_the_backdated_grant_is_still_append_only(plans):
    workspace = WorkspaceFactory(name="Fixed")
    account_for(workspace)
    grant = _grant(workspace)
    with pytest.raises(DatabaseError), transaction.atomic():
        LedgerEntry.objects.filter(pk=grant.pk).update(created_at=timezone.now())
    with pytest.raises(DatabaseError), transaction.atomic():
        LedgerEntry.objects.filter(pk=grant.pk).delete()
    grant.refresh_from_db()
    assert grant.created_at == workspace.created_at
