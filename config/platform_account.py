"""`GET /api/account/summary`, the Ultralytics Platform's account summary, as stock clients
call it (issue 20): `yolo login <key>` saves the key only once this answers 200, and the
`ul` CLI (ultralytics_platform.cli) takes `username` as the owner of every path it is not
given one for. A Kestrel key belongs to one workspace, so that workspace is the account:
`username` is its slug (what `project=<ws>/...` and `ul://<ws>/...` name). A browser session's
account is the user's personal workspace, with their team workspaces in `teams`.

It lives in config, the composition root, because it counts rows of several apps.

Answers are JSON; 401 only for a missing or invalid key (the client's `yolo login` reads 401
as "Invalid API key"). No secret is in the answer: the plan, and, for a caller who may read
the workspace, its counts and spendable credits."""

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from billing import ledger
from datasets.selectors import dataset_list
from training.selectors import model_list
from workspaces import selectors as workspace_selectors
from workspaces.models import Membership, Workspace
from workspaces.permissions import Perm
from workspaces.services.keys import api_key_authenticate

MICRO_PER_CENT = 10_000  # one credit is one US dollar (core.money): 1,000,000 micro-credits
NO_KEY = (
    "Send a Kestrel API key as `Authorization: Bearer ul_…` (Workspace → API keys on this "
    "site), or sign in."
)


def _refused(message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=401)


def _account(workspace: Workspace, *, may_read: bool) -> dict:
    account = {
        "username": workspace.slug,
        "name": workspace.name,
        "accountType": "personal" if workspace.is_personal else "team",
        "plan": workspace.plan.slug,
        "teams": [],
    }
    if may_read:
        account["counts"] = {
            "projects": workspace_selectors.project_list(workspace=workspace).count(),
            "datasets": dataset_list(workspace=workspace).count(),
            "models": model_list(workspace=workspace).count(),
        }
        account["creditsCents"] = ledger.account_for(workspace).available // MICRO_PER_CENT
    return account


def _teams(user) -> list[dict]:
    memberships = (
        Membership.objects.filter(user=user, workspace__is_personal=False)
        .select_related("workspace__plan")
        .order_by("workspace__slug")
    )
    return [
        {
            "userId": str(m.workspace_id),
            "username": m.workspace.slug,
            "fullName": m.workspace.name,
            "plan": m.workspace.plan.slug,
            "role": m.role,
        }
        for m in memberships
    ]


@never_cache
@require_GET
def account_summary(request: HttpRequest) -> JsonResponse:
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _refused(NO_KEY)
        key = api_key_authenticate(raw=token.strip())
        if key is None:
            return _refused(
                "This API key is not valid: it is unknown, revoked or expired. Make a key on "
                "Workspace → API keys."
            )
        try:
            access = workspace_selectors.workspace_access_for_api_key(
                api_key=key, slug=key.workspace.slug
            )
        except Http404:  # its creator left the workspace: the key acts for no one
            return _refused(
                "This API key no longer acts for anyone: the member who made it left its "
                "workspace. Make a new key on Workspace → API keys."
            )
        return JsonResponse(_account(access.workspace, may_read=access.can(Perm.READ)))
    if not request.user.is_authenticated:
        return _refused(NO_KEY)
    personal = (
        Workspace.objects.for_user(request.user)
        .filter(is_personal=True)
        .select_related("plan")
        .first()
    )
    summary = _account(personal, may_read=True) if personal is not None else {}
    summary["teams"] = _teams(request.user)
    return JsonResponse(summary)
