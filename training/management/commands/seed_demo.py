import secrets

from django.core.management.base import BaseCommand
from django.db import transaction
from django.urls import reverse

from billing.ledger import credits_grant
from billing.plans import plans_seed
from core.money import MICRO
from datasets.services.demo import demo_dataset_seed
from training.services.catalog import gpu_catalog_seed
from training.services.demo_model import demo_model_seed
from workspaces.models import Role, User, Workspace
from workspaces.selectors import workspace_access_for_user
from workspaces.services.invitations import user_address_confirm
from workspaces.services.workspaces import workspace_create_personal, workspace_create_team

ADMIN_EMAIL = "admin@example.com"
DEMO_TEAM = "Demo Team"
DEMO_CREDITS = 5 * MICRO


class Command(BaseCommand):
    help = (
        "Seed the plans, a superuser admin@example.com, a demo team with its public dataset, "
        "and (once) the job that trains its demo model. Safe to run again."
    )

    @transaction.atomic
    def handle(self, *args, **options) -> None:
        plans = plans_seed()
        self.stdout.write(f"Plans: {', '.join(p.name for p in plans)}")
        gpu_catalog_seed()
        admin = User.objects.filter(email=ADMIN_EMAIL).first()
        if admin is None:
            password = secrets.token_urlsafe(12)
            admin = User.objects.create_superuser(email=ADMIN_EMAIL, password=password)
            self.stdout.write(
                self.style.SUCCESS(
                    f"Superuser {ADMIN_EMAIL} created. Password (shown once): {password}"
                )
            )
        else:
            self.stdout.write(f"Superuser {ADMIN_EMAIL} exists; its password is unchanged.")
        user_address_confirm(user=admin)  # signs in without a confirmation mail
        workspace_create_personal(user=admin)
        team = Workspace.objects.filter(
            is_personal=False, name=DEMO_TEAM, memberships__user=admin, memberships__role=Role.OWNER
        ).first()
        if team is None:
            team = workspace_create_team(user=admin, name=DEMO_TEAM)
            # A new team starts with no credits (sign-up credits are a person's): the demo's
            # runs need some wherever an administrator has priced "This machine".
            credits_grant(team, DEMO_CREDITS, reason="Demo team credits (seed_demo)")
            self.stdout.write(f"Demo team workspace: /w/{team.slug}/")
        demo = demo_dataset_seed()
        self.stdout.write(f"Public demo dataset: {demo.name} (/explore/{demo.pk}/)")
        access = workspace_access_for_user(user=admin, slug=team.slug)
        job = demo_model_seed(access=access, dataset=demo)
        if job is not None:
            project = reverse("project_detail", kwargs={"ws_slug": team.slug, "pk": job.project_id})
            explore = reverse("public_dataset", kwargs={"pk": demo.pk})
            self.stdout.write(
                "Demo model: training on this machine in the background, about two minutes "
                f"({project}); then try it from {explore}"
            )
