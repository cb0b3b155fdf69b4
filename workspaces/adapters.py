from allauth.account.adapter import DefaultAccountAdapter
from django.db import transaction

from workspaces.services.workspaces import user_signup_credits_grant, workspace_create_personal


class AccountAdapter(DefaultAccountAdapter):
    """Every new account gets its personal workspace in the same transaction; a confirmed
    address brings its person's sign-up credits, once."""

    def save_user(self, request, user, form, commit=True):
        with transaction.atomic():
            user = super().save_user(request, user, form, commit=commit)
            if commit:
                workspace_create_personal(user=user)
        return user

    def confirm_email(self, request, email_address) -> bool:
        # allauth's one path for a confirmation link or code: the address is confirmed and the
        # credits granted together, or neither.
        with transaction.atomic():
            confirmed = super().confirm_email(request, email_address)
            if confirmed:
                user_signup_credits_grant(user=email_address.user)
        return confirmed
