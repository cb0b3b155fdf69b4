"""What the routes stock `ultralytics` calls (issue 20: ul:// resolution, its webhooks) share:
who the caller is, the workspace and project a URI names, and the JSON error they answer.

The client's rules decide the answers (ultralytics/utils/checks.py, resolve_platform_uri, and
the ultralytics_platform client): a 401 makes it give up on the key for the whole process, so
401 is only for a key that is not a live key; a key lacking the scope is 403; an unknown or
another team's workspace, project or row is one and the same 404. It shows the `error` of a
JSON body to the person, and retries 408, 409, 429 and 5xx.
"""

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from django.http import Http404, HttpRequest, JsonResponse

from workspaces.models import Project, Workspace
from workspaces.permissions import Perm
from workspaces.selectors import (
    WorkspaceAccess,
    workspace_access_for_api_key,
    workspace_access_for_user,
)
from workspaces.services.keys import api_key_authenticate

T = TypeVar("T")


class PlatformRefusal(Exception):
    """An answer other than success: its HTTP status and the sentence a person reads."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def platform_error(status: int, message: str) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="Kestrel"'
    return response


def platform_slug(text: str) -> str:
    """A name as the Ultralytics client makes it a slug (ultralytics/utils/callbacks/platform.py,
    slugify): 'My Project 1' -> 'my-project-1'. The URIs a person types use it too."""
    text = re.sub(r"[^a-z0-9\s-]", "", str(text).lower()).replace(" ", "-")
    return re.sub(r"-+", "-", text).strip("-")[:128]


def platform_matches(rows: Iterable[T], ident: str, names: Callable[[T], list[str]]) -> list[T]:
    """The rows a URI part names (case aside): each row's `names` are tried in order (say its
    exact name before its slug), and the earliest kind of match that any row has wins, so
    'birds-ds' names the dataset called birds-ds before one called Birds DS."""
    ident_lower = ident.lower()
    tiers: dict[int, list[T]] = {}
    for row in rows:
        for tier, name in enumerate(names(row)):
            if name and name.lower() == ident_lower:
                tiers.setdefault(tier, []).append(row)
                break
    return tiers[min(tiers)] if tiers else []


def platform_name_forms(name: str) -> list[str]:
    """What `platform_matches` compares for one name: the name itself, then its slug."""
    return [name, platform_slug(name)]


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def platform_access(request: HttpRequest, *, owner: str, not_found: str) -> WorkspaceAccess:
    """The caller's access to the workspace whose slug is `owner` (as typed: any case): by the
    API key of `Authorization: Bearer`, else by the signed-in session. Raises PlatformRefusal:
    401 for no key or one that is not a live key, 404 (`not_found`) for a workspace that is
    unknown or not the caller's."""
    header = request.headers.get("Authorization")
    if header is not None:
        token = _bearer(request)
        key = api_key_authenticate(raw=token) if token else None
        if key is None:
            raise PlatformRefusal(
                401, "This API key is not valid: it is unknown, revoked or expired."
            )
        if key.workspace.slug.lower() != owner.lower():
            raise PlatformRefusal(404, not_found)
        try:
            return workspace_access_for_api_key(api_key=key, slug=key.workspace.slug)
        except Http404:  # the key's creator left the workspace
            raise PlatformRefusal(404, not_found) from None
    if not request.user.is_authenticated:
        raise PlatformRefusal(
            401, "Authentication required: set ULTRALYTICS_API_KEY to a Kestrel API key."
        )
    slug = Workspace.objects.filter(slug__iexact=owner).values_list("slug", flat=True).first()
    try:
        return workspace_access_for_user(user=request.user, slug=slug or "")
    except Http404:
        raise PlatformRefusal(404, not_found) from None


def platform_require_any(access: WorkspaceAccess, perms: tuple[Perm, ...], what: str) -> None:
    """403 unless the caller may do one of `perms` (a key's scopes narrow its creator's role)."""
    if any(access.can(perm) for perm in perms):
        return
    names = " or ".join(perm.value for perm in perms)
    if access.api_key is not None:
        raise PlatformRefusal(403, f"This API key needs the {names} scope to {what}.")
    raise PlatformRefusal(403, f"Your role in {access.workspace.name} does not let you {what}.")


def platform_project_find(*, workspace: Workspace, ident: str, not_found: str) -> Project:
    """The project a URI part names in `workspace`: its name (any case) or the slug of it.
    Several projects slugifying alike and none named exactly so: 422, naming them."""
    rows = list(Project.objects.for_workspace(workspace).values_list("pk", "name"))
    found = platform_matches(rows, ident, lambda row: platform_name_forms(row[1]))
    if not found:
        raise PlatformRefusal(404, not_found)
    if len(found) > 1:
        names = ", ".join(sorted(name for _, name in found))
        raise PlatformRefusal(
            422, f"“{ident}” names several projects ({names}): use the exact name of one."
        )
    return Project.objects.for_workspace(workspace).get(pk=found[0][0])
