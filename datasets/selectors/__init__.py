"""Reads of datasets. Rows are reached through the workspace the caller has access to."""

from django.db.models import QuerySet
from django.http import Http404

from datasets.models import Dataset, DatasetVersion, Image, Import
from workspaces.models import Workspace
from workspaces.selectors import WorkspaceAccess, row_for_caller


def dataset_list(*, workspace: Workspace) -> QuerySet[Dataset]:
    return Dataset.objects.for_workspace(workspace).select_related("cloned_from")


def import_rows() -> QuerySet[Import]:
    return Import.objects.select_related("dataset")


def dataset_get(*, workspace: Workspace, pk: int) -> Dataset:
    dataset = dataset_list(workspace=workspace).filter(pk=pk).first()
    if dataset is None:
        raise Http404("No such dataset.")
    return dataset


def dataset_access_for_caller(*, auth, user, pk: int) -> tuple[WorkspaceAccess, Dataset]:
    """For API routes naming a dataset by id only: 404 unless the caller reaches its workspace."""
    return row_for_caller(
        Dataset.objects.select_related("cloned_from"),
        pk=pk,
        auth=auth,
        user=user,
        not_found="No such dataset.",
    )


def import_access_for_caller(*, auth, user, pk: int) -> tuple[WorkspaceAccess, Import]:
    """For API routes naming an import by id only: 404 unless the caller reaches its workspace."""
    return row_for_caller(
        import_rows(),
        pk=pk,
        auth=auth,
        user=user,
        not_found="No such import.",
        workspace="dataset__workspace",
    )


def dataset_public_list() -> QuerySet[Dataset]:
    return Dataset.objects.public().select_related("workspace").order_by("name", "id")


def dataset_public_get(*, pk: int) -> Dataset:
    dataset = dataset_public_list().filter(pk=pk).first()
    if dataset is None:
        raise Http404("No such public dataset.")
    return dataset


def image_get(*, dataset: Dataset, pk: int) -> Image:
    image = Image.objects.filter(dataset=dataset, pk=pk).select_related("blob").first()
    if image is None:
        raise Http404("No such image.")
    return image


def import_list(*, dataset: Dataset) -> QuerySet[Import]:
    return Import.objects.filter(dataset=dataset)


def import_get(*, workspace: Workspace, pk: int) -> Import:
    imp = import_rows().filter(dataset__workspace=workspace, pk=pk).first()
    if imp is None:
        raise Http404("No such import.")
    return imp


def version_get(*, dataset: Dataset, number: int) -> DatasetVersion:
    version = DatasetVersion.objects.filter(dataset=dataset, number=number).first()
    if version is None:
        raise Http404("No such version.")
    return version
