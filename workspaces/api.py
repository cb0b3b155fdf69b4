"""JSON API for workspaces, members, projects and API keys (django-ninja, under /api/v1/)."""

from datetime import datetime

from django.conf import settings
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate
from ninja.security import APIKeyCookie, HttpBearer

from workspaces import selectors
from workspaces.models import ApiKey, ApiKeyScope, Membership
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess
from workspaces.services import keys, members, projects


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        return keys.api_key_authenticate(raw=token)


class SessionAuth(APIKeyCookie):
    """The browser session, CSRF-checked. A call without a signed-in session is just not
    authenticated by it (the API answers 401), never refused as a CSRF failure: django-ninja's
    own session auth checks CSRF first, so a keyless script was told "CSRF check Failed"."""

    param_name = settings.SESSION_COOKIE_NAME

    def _get_key(self, request: HttpRequest) -> str | None:
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None):
        return request.user if request.user.is_authenticated else None


session_auth = SessionAuth()


def api_access(request: HttpRequest, slug: str, perm: Perm) -> WorkspaceAccess:
    """The caller's access to a workspace for an API operation that needs `perm`."""
    access = selectors.workspace_access_for_caller(auth=request.auth, user=request.user, slug=slug)
    access.require(perm)
    return access


router = Router()


class WorkspaceOut(Schema):
    slug: str
    name: str
    is_personal: bool
    plan: str
    role: str


class MemberOut(Schema):
    id: int
    email: str
    role: str
    joined_at: datetime

    @staticmethod
    def resolve_email(membership: Membership) -> str:
        return membership.user.email

    @staticmethod
    def resolve_joined_at(membership: Membership) -> datetime:
        return membership.created_at


class RoleIn(Schema):
    role: str


class ProjectIn(Schema):
    name: str = Field(max_length=100)
    description: str = Field("", max_length=10_000)


class ProjectPatch(Schema):
    name: str | None = Field(None, max_length=100)
    description: str | None = Field(None, max_length=10_000)


class ProjectOut(Schema):
    id: int
    name: str
    description: str
    created_at: datetime
    updated_at: datetime


class KeyIn(Schema):
    name: str = Field(max_length=100)
    scopes: list[str] = Field(max_length=len(ApiKeyScope.values))
    expires_at: datetime | None = None


class KeyOut(Schema):
    id: int
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None


class KeyCreated(KeyOut):
    key: str


def _workspace_out(access: WorkspaceAccess) -> WorkspaceOut:
    ws = access.workspace
    return WorkspaceOut(
        slug=ws.slug, name=ws.name, is_personal=ws.is_personal, plan=ws.plan.name, role=access.role
    )


@router.get("/workspaces", response=list[WorkspaceOut], tags=["workspaces"])
def workspace_list(request):
    """The workspaces the caller can reach: a key sees only its own."""
    slugs = selectors.workspace_slugs_for_caller(auth=request.auth, user=request.user)
    return [_workspace_out(api_access(request, slug, Perm.READ)) for slug in slugs]


@router.get("/workspaces/{slug}", response=WorkspaceOut, tags=["workspaces"])
def workspace_get(request, slug: str):
    return _workspace_out(api_access(request, slug, Perm.READ))


@router.get("/workspaces/{slug}/members", response=list[MemberOut], tags=["members"])
@paginate
def member_list(request, slug: str):
    access = api_access(request, slug, Perm.READ)
    return list(selectors.membership_list(workspace=access.workspace))


@router.patch("/workspaces/{slug}/members/{member_id}", response=MemberOut, tags=["members"])
def member_update(request, slug: str, member_id: int, payload: RoleIn):
    access = api_access(request, slug, Perm.MANAGE_MEMBERS)
    membership = selectors.membership_get(workspace=access.workspace, pk=member_id)
    membership = members.membership_change_role(
        access=access, membership=membership, role=payload.role
    )
    return membership


@router.delete("/workspaces/{slug}/members/{member_id}", response={204: None}, tags=["members"])
def member_remove(request, slug: str, member_id: int):
    access = api_access(request, slug, Perm.MANAGE_MEMBERS)
    membership = selectors.membership_get(workspace=access.workspace, pk=member_id)
    members.membership_remove(access=access, membership=membership)
    return Status(204, None)


@router.get("/workspaces/{slug}/projects", response=list[ProjectOut], tags=["projects"])
@paginate
def project_list(request, slug: str):
    access = api_access(request, slug, Perm.READ)
    return selectors.project_list(workspace=access.workspace)


@router.post("/workspaces/{slug}/projects", response={201: ProjectOut}, tags=["projects"])
def project_create(request, slug: str, payload: ProjectIn):
    access = api_access(request, slug, Perm.WRITE)
    project = projects.project_create(
        access=access, name=payload.name, description=payload.description
    )
    return Status(201, project)


@router.get("/workspaces/{slug}/projects/{project_id}", response=ProjectOut, tags=["projects"])
def project_get(request, slug: str, project_id: int):
    access = api_access(request, slug, Perm.READ)
    return selectors.project_get(workspace=access.workspace, pk=project_id)


@router.patch("/workspaces/{slug}/projects/{project_id}", response=ProjectOut, tags=["projects"])
def project_update(request, slug: str, project_id: int, payload: ProjectPatch):
    access = api_access(request, slug, Perm.WRITE)
    project = selectors.project_get(workspace=access.workspace, pk=project_id)
    return projects.project_update(
        access=access,
        project=project,
        name=payload.name if payload.name is not None else project.name,
        description=payload.description if payload.description is not None else project.description,
    )


@router.delete("/workspaces/{slug}/projects/{project_id}", response={204: None}, tags=["projects"])
def project_delete(request, slug: str, project_id: int):
    access = api_access(request, slug, Perm.WRITE)
    project = selectors.project_get(workspace=access.workspace, pk=project_id)
    projects.project_delete(access=access, project=project, confirm_name=project.name)
    return Status(204, None)


@router.get("/workspaces/{slug}/keys", response=list[KeyOut], tags=["keys"])
def key_list(request, slug: str):
    access = api_access(request, slug, Perm.MANAGE_KEYS)
    return selectors.api_key_list(workspace=access.workspace)


@router.post("/workspaces/{slug}/keys", response={201: KeyCreated}, tags=["keys"])
def key_create(request, slug: str, payload: KeyIn):
    """Create a key. The `key` field is shown only in this response; store it now."""
    access = api_access(request, slug, Perm.MANAGE_KEYS)
    key, raw = keys.api_key_create(
        access=access, name=payload.name, scopes=payload.scopes, expires_at=payload.expires_at
    )
    return Status(201, KeyCreated(**KeyOut.from_orm(key).dict(), key=raw))


@router.delete("/workspaces/{slug}/keys/{key_id}", response={204: None}, tags=["keys"])
def key_revoke(request, slug: str, key_id: int):
    access = api_access(request, slug, Perm.MANAGE_KEYS)
    keys.api_key_revoke(
        access=access, key=selectors.api_key_get(workspace=access.workspace, pk=key_id)
    )
    return Status(204, None)
