from django.conf import settings
from django.db import models
from django.utils import timezone

from core.money import from_micro


class Plan(models.Model):
    """What a workspace may use: seats, upload sizes, credits, concurrency, storage."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=60)
    max_seats = models.PositiveIntegerField(
        help_text="Members plus pending invitations a team workspace may have."
    )
    max_upload_bytes = models.PositiveBigIntegerField(
        default=2 * 1024**3, help_text="Largest upload (one archive or one batch of files)."
    )
    max_import_inflated_bytes = models.PositiveBigIntegerField(
        default=8 * 1024**3, help_text="Most bytes an uploaded archive may inflate to."
    )
    signup_credits = models.PositiveBigIntegerField(
        default=0,
        help_text="Micro-credits granted once per person, into their personal workspace, when "
        "they confirm their address (billing.ledger.signup_credits_grant).",
    )
    monthly_credits = models.PositiveBigIntegerField(
        default=0, help_text="Micro-credits granted at the start of each month."
    )
    max_concurrent_jobs = models.PositiveIntegerField(
        default=1, help_text="Training jobs that may run at the same time."
    )
    storage_quota_bytes = models.PositiveBigIntegerField(
        default=10 * 1000**3, help_text="Bytes of datasets, checkpoints and models."
    )
    max_deployments = models.PositiveIntegerField(default=1)
    predict_requests_per_minute = models.PositiveIntegerField(
        default=20, help_text="Inference API calls per minute, per API key."
    )
    max_model_upload_bytes = models.PositiveBigIntegerField(
        default=200 * 1000**2, help_text="Largest model weights file that may be uploaded."
    )
    max_video_frames = models.PositiveIntegerField(
        default=3000, help_text="Most frames an import takes from one video."
    )
    is_default = models.BooleanField(
        default=False, help_text="Given to new workspaces. Exactly one plan is the default."
    )
    sort_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort_order", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"],
                condition=models.Q(is_default=True),
                name="billing_plan_single_default",
            )
        ]

    def __str__(self) -> str:
        return self.name


class CreditAccount(models.Model):
    """A workspace's credits. `balance` includes `held`; what can be spent is `available`.

    Changed only by billing/ledger.py, together with a LedgerEntry, so `balance` and `held`
    always equal what the entries add up to (`manage.py billing_reconcile` checks).

    The account outlives its workspace (SET_NULL): ledger rows are append-only in the database,
    so the history of a deleted workspace stays, with the slug it had.
    """

    workspace = models.OneToOneField(
        "workspaces.Workspace",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="credit_account",
    )
    workspace_slug = models.SlugField(max_length=60, help_text="The slug when the account opened.")
    balance = models.BigIntegerField(default=0)
    held = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(balance__gte=models.F("held")),
                name="billing_account_available_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(held__gte=0), name="billing_account_held_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"Credits of {self.workspace_slug}"

    @property
    def available(self) -> int:
        return self.balance - self.held


class EntryKind(models.TextChoices):
    """How each kind moves the account (amount in signed micro-credits).

    grant, purchase, refund: amount > 0, balance += amount.
    adjustment: amount ≠ 0 (either sign), balance += amount.
    expire: amount < 0, balance += amount.
    hold (placing or extending a job's hold): amount > 0, held += amount (available shrinks).
    capture: amount < 0, balance += amount and held −= the part taken from the job's hold.
    release: amount > 0, held −= amount (returns the rest of a hold to available).
    """

    GRANT = "grant", "Grant"
    PURCHASE = "purchase", "Purchase"
    HOLD = "hold", "Hold"
    CAPTURE = "capture", "Capture"
    RELEASE = "release", "Release"
    REFUND = "refund", "Refund"
    EXPIRE = "expire", "Expire"
    ADJUSTMENT = "adjustment", "Adjustment"


class LedgerEntry(models.Model):
    """One movement of credits. Append-only: database triggers refuse UPDATE and DELETE.

    `job` and `admin` keep their ids without a database constraint (DO_NOTHING): deleting a job
    (with its workspace) or a user must not touch ledger rows, and the id stays as history.
    """

    account = models.ForeignKey(CreditAccount, on_delete=models.PROTECT, related_name="entries")
    kind = models.CharField(max_length=12, choices=EntryKind.choices)
    amount = models.BigIntegerField(help_text="Signed micro-credits (see EntryKind).")
    hold_delta = models.BigIntegerField(
        default=0, help_text="Change of the account's held micro-credits."
    )
    balance_after = models.BigIntegerField()
    held_after = models.BigIntegerField()
    job = models.ForeignKey(
        "training.TrainingJob",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    payment_ref = models.CharField(max_length=200, blank=True)
    period = models.CharField(
        max_length=7, blank=True, help_text="YYYY-MM of a monthly grant (one per month)."
    )
    admin = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    reason = models.TextField(blank=True)
    # When the movement happened: now, except a signup grant, dated when its workspace was
    # created (billing.ledger.account_open). Never changed afterwards (append-only).
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["account", "-id"], name="billing_entry_account_id")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=EntryKind.values), name="billing_entry_kind_valid"
            ),
            models.UniqueConstraint(
                fields=["payment_ref"],
                condition=models.Q(kind="purchase") & ~models.Q(payment_ref=""),
                name="billing_entry_purchase_once",
            ),
            models.UniqueConstraint(
                fields=["account", "period"],
                condition=~models.Q(period=""),
                name="billing_entry_monthly_once",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {from_micro(self.amount):,.2f} credits"


class SignupGrant(models.Model):
    """The sign-up credits a person was given: one row per person, so the database itself
    refuses a second grant (billing.ledger.signup_credits_grant). A person is the account and
    the address it confirmed: the same address on a new account gets none either.

    The row outlives the account (SET_NULL), as the ledger entry it names does."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="signup_grant",
    )
    email = models.EmailField(unique=True, help_text="The confirmed address, in lower case.")
    entry = models.OneToOneField(LedgerEntry, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"Sign-up credits of {self.email}"


class PaymentStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    PAID = "paid", "Paid"
    DISPUTED = "disputed", "Amount differs: needs an administrator"


class Payment(models.Model):
    """One credit top-up through Stripe Checkout; fulfilled at most once (billing.payments)."""

    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.SET_NULL, null=True, related_name="payments"
    )
    amount = models.BigIntegerField(help_text="Micro-credits bought.")
    amount_cents = models.PositiveIntegerField(help_text="What Stripe charges, in cents.")
    stripe_session_id = models.CharField(max_length=255, unique=True, null=True, blank=True)
    status = models.CharField(
        max_length=10, choices=PaymentStatus.choices, default=PaymentStatus.PENDING
    )
    ledger_entry = models.ForeignKey(
        "LedgerEntry", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    paid_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gt=0), name="payment_positive")
        ]

    def __str__(self) -> str:
        return f"Payment {self.pk} ({self.get_status_display()})"


class StripeEvent(models.Model):
    """Each webhook event id Stripe sent, recorded once: a replay changes nothing."""

    event_id = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=100)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.event_id
