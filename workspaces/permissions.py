"""The one permission table: what each role, and each API key scope, may do in a workspace."""

from enum import StrEnum

from workspaces.models import ApiKeyScope, Role


class Perm(StrEnum):
    READ = "read"  # see everything in the workspace
    WRITE = "write"  # change data: projects, datasets, labels
    REVIEW = "review"  # approve or reject labels (admins, and members flagged as reviewers)
    TRAIN = "train"  # start and stop training jobs
    PREDICT = "predict"  # call deployed models
    MANAGE_MEMBERS = "manage_members"  # invite, remove, change roles
    MANAGE_KEYS = "manage_keys"  # create and revoke API keys
    MANAGE_BILLING = "manage_billing"
    MANAGE_WORKSPACE = "manage_workspace"  # rename
    DELETE_WORKSPACE = "delete_workspace"
    TRANSFER_OWNERSHIP = "transfer_ownership"

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


_VIEWER = frozenset({Perm.READ})
_EDITOR = _VIEWER | {Perm.WRITE, Perm.TRAIN, Perm.PREDICT}
_ADMIN = _EDITOR | {
    Perm.REVIEW,
    Perm.MANAGE_MEMBERS,
    Perm.MANAGE_KEYS,
    Perm.MANAGE_BILLING,
    Perm.MANAGE_WORKSPACE,
}
_OWNER = _ADMIN | {Perm.DELETE_WORKSPACE, Perm.TRANSFER_OWNERSHIP}

ROLE_PERMISSIONS: dict[str, frozenset[Perm]] = {
    Role.VIEWER: _VIEWER,
    Role.EDITOR: _EDITOR,
    Role.ADMIN: _ADMIN,
    Role.OWNER: _OWNER,
}

# What a key may do is what its creator's role allows, narrowed to the key's scopes. Making
# keys and managing members have scopes of their own: either one could otherwise turn a key
# into a stronger key (directly, or by inviting an admin who makes one).
SCOPE_PERMISSIONS: dict[str, frozenset[Perm]] = {
    ApiKeyScope.READ: frozenset({Perm.READ}),
    ApiKeyScope.WRITE: frozenset({Perm.WRITE, Perm.REVIEW, Perm.MANAGE_WORKSPACE}),
    ApiKeyScope.TRAIN: frozenset({Perm.TRAIN}),
    ApiKeyScope.PREDICT: frozenset({Perm.PREDICT}),
    ApiKeyScope.MEMBERS: frozenset({Perm.MANAGE_MEMBERS}),
    ApiKeyScope.KEYS: frozenset({Perm.MANAGE_KEYS}),
}

ROLE_RANK = {Role.VIEWER: 0, Role.EDITOR: 1, Role.ADMIN: 2, Role.OWNER: 3}

PERM_REQUIRED_ROLE = {
    perm: next(
        role
        for role in (Role.VIEWER, Role.EDITOR, Role.ADMIN, Role.OWNER)
        if perm in ROLE_PERMISSIONS[role]
    )
    for perm in Perm
}


def role_permissions(role: str, *, is_reviewer: bool = False) -> frozenset[Perm]:
    """A role's permissions; an editor flagged as a reviewer may also review."""
    perms = ROLE_PERMISSIONS.get(role, frozenset())
    if is_reviewer and Perm.WRITE in perms:
        perms = perms | {Perm.REVIEW}
    return perms


def scopes_permissions(scopes: list[str]) -> frozenset[Perm]:
    perms: frozenset[Perm] = frozenset()
    for scope in scopes:
        perms |= SCOPE_PERMISSIONS.get(scope, frozenset())
    return perms


def roles_assignable_by(role: str) -> list[str]:
    """Roles a member may give others: never above their own, and owner only by an owner."""
    return [r for r in Role.values if ROLE_RANK[r] <= ROLE_RANK.get(role, -1)]
