"""Writes to projects: create, update, delete."""

from django.db import IntegrityError, transaction

from core.errors import ServiceError
from workspaces.models import (
    Project,
)
from workspaces.permissions import Perm
from workspaces.selectors import (
    WorkspaceAccess,
)


def _project_save(project: Project, update_fields: list[str] | None = None) -> Project:
    try:
        with transaction.atomic():
            project.save(update_fields=update_fields)
    except IntegrityError:
        raise ServiceError(f"A project named “{project.name}” already exists here.") from None
    return project


def _clean_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise ServiceError("Give the project a name.")
    return name


@transaction.atomic
def project_create(*, access: WorkspaceAccess, name: str, description: str = "") -> Project:
    access.require(Perm.WRITE)
    project = Project(
        workspace=access.workspace,
        name=_clean_name(name),
        description=description.strip(),
        created_by=access.user,
    )
    return _project_save(project)


@transaction.atomic
def project_update(
    *, access: WorkspaceAccess, project: Project, name: str, description: str
) -> Project:
    access.require(Perm.WRITE)
    project.name = _clean_name(name)
    project.description = description.strip()
    return _project_save(project, update_fields=["name", "description", "updated_at"])


@transaction.atomic
def project_delete(*, access: WorkspaceAccess, project: Project, confirm_name: str) -> None:
    access.require(Perm.WRITE)
    if confirm_name.strip() != project.name:
        raise ServiceError(f"Type the project name “{project.name}” to confirm.")
    project.delete()
