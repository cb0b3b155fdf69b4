""" "Train on your own machine": the two variables and the commands that make stock
`ultralytics` report a run to this project, and a button that makes the key they need.

The key's plaintext is shown once. Without JavaScript the button's POST redirects (the
plaintext waits in the session, never in a URL, and the next GET pops it), so a reload makes
no second key; with htmx the POST answers the variables' partial itself and a reload is a
plain GET of the page."""

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from core.http import HtmxHttpRequest
from training.services.own_machine import (
    LOCAL_DATA,
    OWN_MACHINE_SCOPES,
    own_machine_datasets,
    own_machine_key_create,
    own_machine_run,
    ultralytics_version,
)
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.models import ApiKey
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

TEMPLATE = "training/own_machine.html"


def _session_key(access: WorkspaceAccess, project) -> str:
    return f"own_machine_key:{access.workspace.pk}:{project.pk}"


def _pending_key(request, access: WorkspaceAccess, project) -> dict | None:
    """The key made by the last POST, popped: shown on this GET and never again."""
    pending = request.session.pop(_session_key(access, project), None)
    if not pending:
        return None
    key = ApiKey.objects.for_workspace(access.workspace).filter(pk=pending["pk"]).first()
    if key is None or key.revoked_at is not None:
        return None
    return {"key": key, "raw": pending["raw"]}


@workspace_view(Perm.READ)
@require_http_methods(["GET", "POST"])
def job_own_machine(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    params = request.POST if request.method == "POST" else request.GET
    datasets = own_machine_datasets(workspace=access.workspace)
    platform_url = request.build_absolute_uri("/").rstrip("/")
    run = own_machine_run(
        access=access,
        project=project,
        platform_url=platform_url,
        data=params.get("data"),
        yaml=params.get("yaml"),
        name=params.get("name"),
        datasets=datasets,
    )
    picked = {
        "data": str(run.dataset.dataset.pk) if run.dataset else LOCAL_DATA,
        "yaml": run.yaml,
        "name": run.run_name,
    }
    new_key = None
    if request.method == "POST":
        access.require(Perm.MANAGE_KEYS)
        try:
            key, raw = own_machine_key_create(access=access, project=project)
        except ServiceError as e:
            messages.error(request, str(e))
        else:
            if request.htmx:
                new_key = {"key": key, "raw": raw}
            else:
                request.session[_session_key(access, project)] = {"pk": key.pk, "raw": raw}
        if new_key is None:
            url = reverse("job_own_machine", args=[access.workspace.slug, project.pk])
            return redirect(f"{url}?{urlencode(picked)}#commands")
    elif not request.htmx:
        new_key = _pending_key(request, access, project)
    context = {
        "access": access,
        "project": project,
        "run": run,
        "datasets": datasets,
        "picked": picked,
        "new_key": new_key,
        "env_lines": run.env_lines(new_key["raw"] if new_key else None),
        "scopes": OWN_MACHINE_SCOPES,
        "site_url": settings.SITE_URL.rstrip("/"),
        "ultralytics_version": ultralytics_version(),
    }
    template = TEMPLATE
    if request.htmx and request.method == "POST":
        template = f"{TEMPLATE}#env"
    elif request.htmx and request.htmx.target == "own-machine-train":
        template = f"{TEMPLATE}#train"
    response = render(request, template, context)
    if new_key is not None:
        add_never_cache_headers(response)  # Back must not bring the plaintext back from a cache
    return response
