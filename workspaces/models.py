from django.conf import settings
from django.contrib.auth.models import AbstractUser, BaseUserManager
from django.db import models
from django.db.models.functions import Lower


class UserManager(BaseUserManager):
    use_in_migrations = True

    def _create(self, email: str, password: str | None, **extra):
        if not email:
            raise ValueError("An email address is required.")
        user = self.model(email=self.normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **extra):
        extra.setdefault("is_staff", False)
        extra.setdefault("is_superuser", False)
        return self._create(email, password, **extra)

    def create_superuser(self, email: str, password: str | None = None, **extra):
        extra.update(is_staff=True, is_superuser=True)
        return self._create(email, password, **extra)


class User(AbstractUser):
    """A person. The email address is the login; there is no username."""

    username = None
    email = models.EmailField("email address", unique=True)

    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    objects = UserManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("email"), name="workspaces_user_email_ci_unique")
        ]

    def __str__(self) -> str:
        return self.email

    @property
    def display_name(self) -> str:
        return self.get_full_name() or self.email


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    EDITOR = "editor", "Editor"
    VIEWER = "viewer", "Viewer"


class WorkspaceQuerySet(models.QuerySet):
    def for_user(self, user) -> "WorkspaceQuerySet":
        return self.filter(memberships__user=user)


class Workspace(models.Model):
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=100)
    is_personal = models.BooleanField(default=False)
    block_training_on_dataset_errors = models.BooleanField(
        default=False, help_text="Refuse to train on a dataset whose health check found errors."
    )
    plan = models.ForeignKey("billing.Plan", on_delete=models.PROTECT, related_name="workspaces")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WorkspaceQuerySet.as_manager()

    class Meta:
        ordering = ["-is_personal", "name"]

    def __str__(self) -> str:
        return self.name


class WorkspaceOwnedQuerySet(models.QuerySet):
    """Rows that belong to a workspace are only ever reached through `.for_workspace(ws)`."""

    def for_workspace(self, workspace: Workspace):
        return self.filter(workspace=workspace)


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=10, choices=Role.choices)
    is_reviewer = models.BooleanField(
        default=False, help_text="May approve or reject labels (admins and owners always may)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique_user"),
            models.CheckConstraint(
                condition=models.Q(role__in=Role.values), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.workspace} ({self.role})"


class Invitation(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    # The link's token is random and opaque (it names no id or address); only its sha256 is
    # kept, so the link is known to the mail and the inviter's page once, and to nobody after.
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    token_issued_at = models.DateTimeField(null=True, blank=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                "workspace",
                Lower("email"),
                condition=models.Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invitation_one_open_per_email",
            ),
            models.UniqueConstraint(
                fields=["token_hash"],
                condition=~models.Q(token_hash=""),
                name="invitation_token_unique",
            ),
            models.CheckConstraint(
                condition=models.Q(role__in=Role.values), name="invitation_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.email} → {self.workspace} ({self.role})"

    @property
    def is_open(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None


class Project(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                "workspace", Lower("name"), name="project_name_unique_in_workspace"
            )
        ]

    def __str__(self) -> str:
        return self.name


class ApiKeyScope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    TRAIN = "train", "Train"
    PREDICT = "predict", "Predict"
    MEMBERS = "members", "Manage members"
    KEYS = "keys", "Manage keys"


PLATFORM_KEY_PREFIX_HEX = 16  # of a `ul_` key's 40 hex; legacy `ksk_` keys have 12


class ApiKey(models.Model):
    """A workspace API key. Only the SHA-256 of the full key is stored; the prefix finds it.
    Issued as `ul_` + 40 hex (the form `yolo login` keeps); older keys are `ksk_<prefix>_<secret>`
    (workspaces.selectors.PresentedKey reads both)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.shown})"

    @property
    def shown(self) -> str:
        """The key as lists show it: its start, the secret left out."""
        if len(self.prefix) == PLATFORM_KEY_PREFIX_HEX:
            return f"ul_{self.prefix}…"
        return f"ksk_{self.prefix}_…"
