from dataclasses import dataclass

import pytest
from django.core.cache import cache

from billing.services import plans_seed
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role, User, Workspace
from workspaces.selectors import workspace_access_for_user


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Rate limits and the cache live in Redis (a test-only database): start each test clean."""
    cache.clear()
    yield


@pytest.fixture
def plans(db):
    return plans_seed()


@dataclass
class Team:
    workspace: Workspace
    owner: User
    admin: User
    editor: User
    viewer: User

    def user(self, role: str) -> User:
        return getattr(self, role)

    def access(self, role: str):
        return workspace_access_for_user(user=self.user(role), slug=self.workspace.slug)


@pytest.fixture
def team(plans) -> Team:
    pro = next(plan for plan in plans if plan.slug == "pro")  # room for invitations
    workspace = WorkspaceFactory(name="Acme Vision", slug="acme", plan=pro)
    users = {}
    for role in Role.values:
        users[role] = UserFactory(email=f"{role}@acme.test")
        MembershipFactory(workspace=workspace, user=users[role], role=role)
    return Team(workspace=workspace, **users)


@pytest.fixture
def stranger(plans) -> User:
    """Someone who owns a workspace of their own and is not in the team's."""
    user = UserFactory(email="stranger@elsewhere.test")
    MembershipFactory(
        workspace=WorkspaceFactory(name="Elsewhere", slug="elsewhere"), user=user, role=Role.OWNER
    )
    return user
