import factory
from allauth.account.models import EmailAddress

from billing.plans import plan_default
from workspaces.models import Membership, Project, Role, User, Workspace

PASSWORD = "correct horse battery staple"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    email = factory.Sequence(lambda n: f"user{n}@example.com")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def email_verified(obj, create, extracted, **kwargs):  # noqa: N805
        """Saved with its address confirmed, as after allauth's confirmation mail;
        `UserFactory(email_verified=False)` for an account that has not confirmed yet."""
        if create:
            obj.save()
            EmailAddress.objects.create(
                user=obj, email=obj.email, primary=True, verified=extracted is not False
            )


class WorkspaceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Workspace

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.Sequence(lambda n: f"Team {n}")
    is_personal = False
    plan = factory.LazyFunction(plan_default)


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    workspace = factory.SubFactory(WorkspaceFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.EDITOR


class ProjectFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Project

    workspace = factory.SubFactory(WorkspaceFactory)
    name = factory.Sequence(lambda n: f"Project {n}")
    description = "Finds kestrels in field photos."
