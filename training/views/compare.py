"""A project's runs side by side."""

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from training import selectors
from training.forms import CompareForm
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


@workspace_view(Perm.READ)
@require_GET
def project_compare(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """2 to 8 of the project's runs (?jobs=1&jobs=2…): their metric and validation loss per
    epoch on shared charts, and their arguments side by side."""
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    form = CompareForm(request.GET)
    jobs = []
    if form.is_valid():
        ids = form.cleaned_data["jobs"]
        jobs = selectors.compare_runs(workspace=access.workspace, project=project, ids=ids)
        found = {job.pk for job in jobs}
        missing = ", ".join(str(i) for i in ids if i not in found)
        if missing:
            one = len(ids) - len(found) == 1
            form.add_error(
                "jobs",
                f"{'Run' if one else 'Runs'} {missing} {'is not a run' if one else 'are not runs'}"
                f" of {project.name}.",
            )
            jobs = []
    context = {"access": access, "project": project, "form": form, "jobs": jobs}
    if not jobs:
        return render(request, "training/compare.html", context, status=400)
    arguments = selectors.compare_arguments(jobs)
    context.update(
        charts=selectors.compare_chart_data(jobs),
        differing=[row for row in arguments if row.differs],
        same=[row for row in arguments if not row.differs],
    )
    return render(request, "training/compare.html", context)
