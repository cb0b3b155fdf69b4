from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required

from workspaces.permissions import Perm
from workspaces.selectors import workspace_access_for_user


def workspace_view(perm: Perm = Perm.READ) -> Callable:
    """Resolve `/w/<ws_slug>/` to the caller's access: stranger 404, member without `perm` 403.

    The view receives the WorkspaceAccess as its second argument; it is the only way pages
    reach a workspace's rows.
    """

    def decorator(view: Callable) -> Callable:
        @login_required
        @wraps(view)
        def wrapper(request, ws_slug: str, *args, **kwargs):
            access = workspace_access_for_user(user=request.user, slug=ws_slug)
            request.workspace_access = access  # the header shows the workspace on a 403 too
            access.require(perm)
            return view(request, access, *args, **kwargs)

        return wrapper

    return decorator
