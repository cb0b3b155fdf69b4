from allauth.account.adapter import DefaultAccountAdapter
from django.db import transaction

from workspaces.services.workspaces import workspace_create_personal


class AccountAdapter(DefaultAccountAdapter):
    """Every new account gets its personal workspace in the same transaction."""

    def save_user(self, request, user, form, commit=True):
        with transaction.atomic():
            user = super().save_user(request, user, form, commit=commit)
            if commit:
                workspace_create_personal(user=user)
        return user
