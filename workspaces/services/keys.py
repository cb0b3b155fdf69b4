"""API keys: create (the plaintext shown once), revoke, and authenticate a presented secret."""

import secrets
from datetime import UTC, datetime

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import ServiceError
from workspaces.models import (
    ApiKey,
    ApiKeyScope,
)
from workspaces.permissions import Perm
from workspaces.selectors import (
    PresentedKey,
    WorkspaceAccess,
    api_key_last_use_note,
    api_key_live,
)

PLATFORM_KEY_BYTES = 20  # `ul_` + 40 hex, as `yolo login` keeps it
PREFIX_ATTEMPTS = 5  # a 64-bit prefix taken already is rare; five in a row is a broken generator


@transaction.atomic
def api_key_create(
    *,
    access: WorkspaceAccess,
    name: str,
    scopes: list[str],
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; the plaintext is returned once and never stored."""
    access.require(Perm.MANAGE_KEYS)
    name = name.strip()
    if not name:
        raise ServiceError("Give the key a name, so you know later what uses it.")
    unknown = set(scopes) - set(ApiKeyScope.values)
    if unknown or not scopes:
        raise ServiceError(f"Choose scopes among: {', '.join(ApiKeyScope.values)}.")
    if expires_at is not None and timezone.is_naive(expires_at):
        expires_at = timezone.make_aware(expires_at, UTC)  # the API documents UTC
    if expires_at is not None and expires_at <= timezone.now():
        raise ServiceError("The expiry must be in the future.")
    parent = access.api_key
    if parent is not None:
        # A key making a key (it has the keys scope, checked above) hands on only what it has.
        missing = [s for s in ApiKeyScope.values if s in scopes and s not in parent.scopes]
        if missing:
            raise PermissionDenied(
                f"This API key cannot grant scopes it does not have: {', '.join(missing)}."
            )
        if parent.expires_at is not None and (expires_at is None or expires_at > parent.expires_at):
            raise ServiceError(
                "A key made by a key must expire no later than it "
                f"({parent.expires_at:%Y-%m-%d %H:%M} UTC)."
            )
    scopes = sorted(set(scopes), key=ApiKeyScope.values.index)
    for _ in range(PREFIX_ATTEMPTS):
        raw = f"ul_{secrets.token_hex(PLATFORM_KEY_BYTES)}"
        presented = PresentedKey(raw)
        try:
            with transaction.atomic():  # a savepoint: a prefix already taken draws again
                key = ApiKey.objects.create(
                    workspace=access.workspace,
                    name=name,
                    prefix=presented.prefix,
                    key_hash=presented.hash,
                    scopes=scopes,
                    created_by=access.user,
                    expires_at=expires_at,
                )
        except IntegrityError:
            if not ApiKey.objects.filter(prefix=presented.prefix).exists():
                raise  # not the prefix: nothing a new draw would mend
            continue
        return key, raw
    raise ServiceError("Could not draw an unused key prefix; try again.")


@transaction.atomic
def api_key_revoke(*, access: WorkspaceAccess, key: ApiKey) -> None:
    access.require(Perm.MANAGE_KEYS)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        # Once committed, the write moves the keys table's token (core.table_changes): every
        # web process drops the lookups it keeps (deploy.api) at the key's next call.
        key.save(update_fields=["revoked_at"])


def api_key_authenticate(*, raw: str) -> ApiKey | None:
    """The live key for a presented secret, or None (malformed, unknown, revoked, expired)."""
    now = timezone.now()
    key = api_key_live(PresentedKey(raw), now=now)
    if key is None:
        return None
    if api_key_last_use_note(key_id=key.pk, last_used_at=key.last_used_at, now=now):
        key.last_used_at = now
    return key
