from workspaces.selectors import workspace_list_for_user


def workspace_nav(request) -> dict:
    """The header's workspace switcher: the user's workspaces, read once per page."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"nav_workspaces": workspace_list_for_user(user=user)}


def mail_delivery(request) -> dict:
    """Whether mail is only printed (the quick start's console backend): pages that say "we
    sent you a mail" then say where to find it."""
    from django.conf import settings

    return {"mail_is_printed": settings.EMAIL_BACKEND.endswith("console.EmailBackend")}
