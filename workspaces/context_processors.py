from dataclasses import dataclass

from django.utils.functional import SimpleLazyObject

from workspaces.models import Workspace
from workspaces.selectors import workspace_labels, workspace_list_for_user


@dataclass
class WorkspaceNav:
    entries: list[tuple[Workspace, str]]  # each workspace with its label (workspace_labels)
    current: str  # the label of the page's workspace


def _nav(request) -> WorkspaceNav:
    entries = workspace_labels(workspace_list_for_user(user=request.user))
    access = getattr(request, "workspace_access", None)
    here = access.workspace if access is not None else None
    current = next((label for w, label in entries if w == here), here.name if here else "")
    return WorkspaceNav(entries=entries, current=current)


def workspace_nav(request) -> dict:
    """The header's workspace switcher: the user's workspaces with their labels (the slug
    beside a name two of them share), read once per page, and only by a page that shows it."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_workspaces": SimpleLazyObject(lambda: _nav(request))}


def mail_delivery(request) -> dict:
    """Whether mail is only printed (the quick start's console backend), and where it lands:
    `make run` writes the web server's output to its log (scripts/supervisord.conf), so pages
    that say "we sent you a mail" say which file to open."""
    from django.conf import settings

    printed = settings.EMAIL_BACKEND.endswith("console.EmailBackend")
    if not printed:
        return {"mail_is_printed": False}
    log = settings.VAR_DIR / "log" / "web.log"
    try:
        log = log.relative_to(settings.BASE_DIR)
    except ValueError:  # KESTREL_VAR_DIR elsewhere: the full path
        pass
    return {"mail_is_printed": True, "mail_log": str(log)}
