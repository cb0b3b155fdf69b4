"""List pages read a constant number of queries, however long the list."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.workspaces.factories import MembershipFactory
from workspaces.models import Invitation
from workspaces.services.keys import api_key_create


def _count(client, url) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def _grow(team, n: int) -> None:
    for _ in range(n):
        MembershipFactory(workspace=team.workspace)
        Invitation.objects.create(
            workspace=team.workspace,
            email=f"pending{Invitation.objects.count()}@acme.test",
            role="viewer",
            expires_at=timezone.now() + timedelta(days=1),
        )
        api_key_create(access=team.access("owner"), name="k", scopes=["read"])


@pytest.mark.django_db
@pytest.mark.parametrize("route", ["member_list", "api_key_list", "workspace_detail"])
def test_list_pages_do_not_grow_queries_with_rows(team, client, route):
    client.force_login(team.owner)
    url = reverse(route, kwargs={"ws_slug": "acme"})
    _grow(team, 1)
    few = _count(client, url)
    _grow(team, 8)
    assert _count(client, url) == few
    assert few <= 10
