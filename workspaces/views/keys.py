"""API keys: the list (where a new key's plaintext is shown once) and revoking one."""

from datetime import UTC, datetime, time

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ServiceError
from core.http import page_of
from workspaces import selectors
from workspaces.decorators import workspace_view
from workspaces.forms import ApiKeyForm
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess
from workspaces.services import keys


@workspace_view(Perm.MANAGE_KEYS)
@require_http_methods(["GET", "POST"])
def api_key_list(request, access: WorkspaceAccess) -> HttpResponse:
    # POST/redirect/GET, so a reload cannot create a second key: the plaintext waits in the
    # session (never in a URL) and the next GET of this workspace's page pops it, shown once.
    session_key = f"new_api_key:{access.workspace.pk}"
    form = ApiKeyForm(request.POST or None)
    new_key = None
    if request.method == "GET" and session_key in request.session:
        pending = request.session.pop(session_key)
        key = selectors.api_key_list(workspace=access.workspace).filter(pk=pending["pk"]).first()
        if key is not None:
            new_key = {"key": key, "raw": pending["raw"]}
    if request.method == "POST" and form.is_valid():
        expires = form.cleaned_data["expires_at"]
        try:
            key, raw = keys.api_key_create(
                access=access,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                expires_at=(datetime.combine(expires, time.min, tzinfo=UTC) if expires else None),
            )
        except ServiceError as e:
            form.add_error(None, str(e))
        else:
            request.session[session_key] = {"pk": key.pk, "raw": raw}
            return redirect("api_key_list", ws_slug=access.workspace.slug)
    response = render(
        request,
        "workspaces/api_key_list.html",
        {
            "access": access,
            "form": form,
            "new_key": new_key,
            "page": page_of(request, selectors.api_key_list(workspace=access.workspace)),
            "now": timezone.now(),
        },
        status=400 if form.errors else 200,
    )
    if new_key is not None:
        add_never_cache_headers(response)  # Back must not bring the plaintext back from a cache
    return response


@workspace_view(Perm.MANAGE_KEYS)
@require_POST
def api_key_revoke(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    key = selectors.api_key_get(workspace=access.workspace, pk=pk)
    keys.api_key_revoke(access=access, key=key)
    messages.success(request, f"Revoked the key {key.name}. Calls using it now get 401.")
    return redirect("api_key_list", ws_slug=access.workspace.slug)
