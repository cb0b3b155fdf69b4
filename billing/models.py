from django.db import models


class Plan(models.Model):
    """What a workspace may use. Credits and GPU rules arrive with the billing issue."""

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
