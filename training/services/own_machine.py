""" "Train on your own machine" (issue 20): the commands that make stock `ultralytics` on a
user's machine report a run to this project, filled with the workspace's real names, and the
key they need.

The names are what the client sends and Kestrel matches (workspaces.platform_api):
`project=<workspace slug>/<project>` has its project part slugified by the client
(ultralytics/utils/callbacks/platform.py, _get_project_name), and so does `name=`; a
`data=ul://<workspace>/datasets/<dataset>` is sent as written and matched by the dataset's name
(any case) or the slug of it. So the commands carry the slugs the client will send, and a
dataset whose slug another dataset shares is named by its exact name instead."""

import re
import shlex
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from django.db import transaction
from django.db.models import Max

from datasets.models import Dataset, Task
from datasets.selectors import dataset_list
from training.models import ModelFamily, ModelSize
from training.services.arguments import TASK_SUFFIXES
from workspaces.models import ApiKey, ApiKeyScope, Project
from workspaces.platform_api import platform_matches, platform_name_forms, platform_slug
from workspaces.selectors import WorkspaceAccess
from workspaces.services.keys import api_key_create

# A key for the run: `train` reports it (the webhooks), `read` lets `data=ul://` and
# `model=ul://` pull from this workspace.
OWN_MACHINE_SCOPES = [ApiKeyScope.READ.value, ApiKeyScope.TRAIN.value]
LOCAL_DATA = ""  # the picker's value for "a dataset YAML on that machine"
DEFAULT_YAML = "data.yaml"
YAML_MAX = 500
DEFAULT_MODEL = f"{ModelFamily.YOLO26}{ModelSize.N}"  # the training form's default too
_UNQUOTABLE = re.compile(r"[\x00-\x1f\x7f]")  # control characters: no command line holds them


@dataclass(frozen=True)
class DataChoice:
    """A workspace dataset as the picker offers it."""

    dataset: Dataset
    latest: int | None  # its newest saved version's number; None: nothing to pull yet
    uri: str  # ul://<workspace>/datasets/<its slug, or its exact name when the slug is shared>

    @property
    def available(self) -> bool:
        return self.latest is not None


@dataclass(frozen=True)
class OwnMachineRun:
    """What the page's commands say, for one choice of data and run name."""

    platform_url: str
    workspace_slug: str
    project_slug: str  # "" when the project's name keeps no letter or digit
    project_clash: list[str]  # other projects whose names the client sends alike
    run_name: str
    data: str  # a ul:// URI or a local path
    dataset: DataChoice | None
    model: str
    yaml: str
    errors: list[str]

    @property
    def can_report(self) -> bool:
        return bool(self.project_slug) and not self.project_clash

    @property
    def train_args(self) -> list[tuple[str, str]]:
        return [
            ("model", self.model),
            ("data", self.data),
            ("project", f"{self.workspace_slug}/{self.project_slug}"),
            ("name", self.run_name),
        ]

    @property
    def train_command(self) -> str:
        return "yolo train " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.train_args)

    def env_lines(self, key: str | None) -> str:
        return "\n".join(
            [
                f"export ULTRALYTICS_PLATFORM_URL={shlex.quote(self.platform_url)}",
                f"export ULTRALYTICS_API_KEY={key if key else '<your key>'}",
            ]
        )


def ultralytics_version() -> str | None:
    """The installed client's version, which this Kestrel was tested against (no import)."""
    try:
        return version("ultralytics")
    except PackageNotFoundError:
        return None


def own_machine_datasets(*, workspace) -> list[DataChoice]:
    """The workspace's datasets, by name, each with the URI that names it for the client."""
    rows = list(
        dataset_list(workspace=workspace).annotate(latest=Max("versions__number")).order_by("name")
    )
    choices = []
    for dataset in rows:
        ident = platform_slug(dataset.name)
        if platform_matches(rows, ident, lambda d: platform_name_forms(d.name)) != [dataset]:
            ident = dataset.name  # its slug names another dataset too: the exact name does not
        choices.append(
            DataChoice(
                dataset=dataset,
                latest=dataset.latest,
                uri=f"ul://{workspace.slug}/datasets/{ident}",
            )
        )
    return choices


def _next_run_name(project: Project) -> str:
    """run1, run2, ...: the first the project has no run of (a clash would become run1-2)."""
    taken = {platform_slug(n) for n in project.jobs.values_list("name", flat=True)}
    number = 1
    while f"run{number}" in taken:
        number += 1
    return f"run{number}"


def own_machine_run(
    *,
    access: WorkspaceAccess,
    project: Project,
    platform_url: str,
    data: str | None,
    yaml: str | None,
    name: str | None,
    datasets: list[DataChoice],
) -> OwnMachineRun:
    """The commands for the picked data (a dataset's pk, or LOCAL_DATA with a path) and run
    name; what cannot be used is replaced by the default and said in `errors`."""
    errors = []
    project_slug = platform_slug(project.name)
    clash = sorted(
        other
        for other in Project.objects.for_workspace(access.workspace)
        .exclude(pk=project.pk)
        .values_list("name", flat=True)
        if project_slug and platform_slug(other) == project_slug
    )
    run_name = platform_slug(name or "") or _next_run_name(project)
    yaml_path = (yaml or "").strip() or DEFAULT_YAML
    if len(yaml_path) > YAML_MAX or _UNQUOTABLE.search(yaml_path):
        errors.append(f"A dataset YAML path is one line of at most {YAML_MAX} characters.")
        yaml_path = DEFAULT_YAML
    picked = None
    if data and data != LOCAL_DATA:
        picked = next(
            (c for c in datasets if str(c.dataset.pk) == data and c.available),
            None,
        )
        if picked is None:
            errors.append("Pick a dataset of this workspace that has a saved version.")
    if picked is None and data is None:
        picked = next((c for c in datasets if c.available), None)  # the first that can be pulled
    task = picked.dataset.task if picked is not None else Task.DETECT
    return OwnMachineRun(
        platform_url=platform_url.rstrip("/"),
        workspace_slug=access.workspace.slug,
        project_slug=project_slug,
        project_clash=clash,
        run_name=run_name,
        data=picked.uri if picked is not None else yaml_path,
        dataset=picked,
        model=f"{DEFAULT_MODEL}{TASK_SUFFIXES[task]}.pt",
        yaml=yaml_path,
        errors=errors,
    )


@transaction.atomic
def own_machine_key_create(*, access: WorkspaceAccess, project: Project) -> tuple[ApiKey, str]:
    """A key for training from one's own machine: read and train, in this workspace."""
    return api_key_create(
        access=access,
        name=f"Own machine: {project.name}"[:100],
        scopes=OWN_MACHINE_SCOPES,
    )
