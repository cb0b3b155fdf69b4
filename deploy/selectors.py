"""Reads: the Models table, and inference calls per day, per key and per model."""

from datetime import timedelta

from django.contrib.sessions.models import Session
from django.db.models import Case, Exists, FloatField, OuterRef, QuerySet, Subquery, Sum, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, NullIf
from django.http import Http404
from django.utils import timezone

from billing.models import Plan
from core.table_changes import tables_watch
from datasets.models import Dataset, Image
from deploy.models import CollectionRule, Deployment, ExportState, ModelExport, UsageDay
from training import selectors as training_selectors
from training.models import TrainedModel, TrainingJob
from training.selectors import MAIN_METRIC
from workspaces.models import ApiKey, Membership, User, Workspace
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

# How many of a public model's dataset's val images its try-it page offers to run it on.
PUBLIC_SAMPLE_IMAGES = 8

# What a prediction call reads of its model, and nothing more: the JSON columns (classes,
# arguments, metrics) and the job's history cost milliseconds to fetch and decode on every call.
PREDICT_MODEL_FIELDS = (
    "id", "name", "task", "imgsz", "weights_key", "weights_sha256", "inspect_state",
    "inspect_error", "workspace__id", "workspace__slug", "workspace__name", "workspace__plan__id",
    "workspace__plan__name", "workspace__plan__predict_requests_per_minute", "job__id",
    "job__state", "is_public",
)  # fmt: skip


def models_for_predict() -> QuerySet[TrainedModel]:
    """Models as a prediction call reads them, in one query: the columns it needs, the
    workspace's plan (its rate limit), the run's state, and the newest ONNX export (id and file)
    that a model server would run instead of the .pt; and the model's collection rule on the
    shared API when it is on (deploy.collection), so a call whose rule is off costs nothing more."""
    onnx = (
        ModelExport.objects.filter(model=OuterRef("pk"), format="onnx", state=ExportState.SUCCEEDED)
        .exclude(file_key="")
        .order_by("-finished_at")
    )
    return (
        TrainedModel.objects.select_related("workspace__plan", "job")
        .only(*PREDICT_MODEL_FIELDS)
        .annotate(
            onnx_id=Subquery(onnx.values("pk")[:1]),
            onnx_key=Subquery(onnx.values("file_key")[:1]),
            collect_rule_id=Subquery(
                collection_rules_on().filter(model=OuterRef("pk")).values("pk")[:1]
            ),
        )
    )


def predict_lookup_watch() -> None:
    """Every table a predict caller's lookup reads (models_for_predict, with the key and the
    membership of workspaces.selectors.row_for_caller; a dedicated endpoint's row, deploy.api;
    the session and its person as Django reads them), watched (core.table_changes): deploy.api
    keeps a caller's lookup while none of it changed. Where a table has frequent writes to what
    the lookup does not read (a job's progress, an export's, a rule's counters, an endpoint's
    health and metering, a workspace's), only the columns it reads count
    (tests/deploy/test_predict_kept.py holds them to the compiled statements); a key's and a
    person's last use, and a session's new or saved data, never count."""

    def columns(model, *fields: str) -> list[str]:
        return [model._meta.get_field(field).column for field in fields]

    tables_watch(TrainedModel._meta.db_table)
    tables_watch(Plan._meta.db_table)
    tables_watch(Membership._meta.db_table)
    tables_watch(Workspace._meta.db_table, columns=columns(Workspace, "id", "slug", "name", "plan"))
    tables_watch(TrainingJob._meta.db_table, columns=columns(TrainingJob, "id", "state"))
    tables_watch(
        ModelExport._meta.db_table,
        columns=columns(ModelExport, "id", "model", "format", "state", "file_key", "finished_at"),
    )
    tables_watch(
        CollectionRule._meta.db_table,
        columns=columns(CollectionRule, "id", "enabled", "dataset", "model", "deployment"),
    )
    tables_watch(
        Deployment._meta.db_table,
        columns=columns(
            Deployment,
            *("id", "slug", "state", "port", "url", "placement", "desired_running", "model"),
            "workspace",
        ),
    )
    tables_watch(ApiKey._meta.db_table, quiet=columns(ApiKey, "last_used_at"))
    tables_watch(User._meta.db_table, quiet=columns(User, "last_login"))
    # A session's person changes only with its key: signing in makes a new row (and deletes
    # the old one), signing out or a password change deletes it. Rows that are added, or
    # written again under the same key, change no kept lookup.
    tables_watch(
        Session._meta.db_table, quiet=columns(Session, "session_data", "expire_date"), inserts=False
    )


def collection_rules_on() -> QuerySet[CollectionRule]:
    """Rules that are on and have a dataset to collect into."""
    return CollectionRule.objects.filter(enabled=True, dataset__isnull=False)


def inference_usage(*, workspace, days: int = 30) -> dict:
    since = timezone.now().date() - timedelta(days=days - 1)
    rows = UsageDay.objects.filter(workspace=workspace, day__gte=since)
    totals = {"calls": Sum("calls"), "errors": Sum("errors"), "images": Sum("images")}
    return {
        "days": days,
        "by_day": list(rows.values("day").annotate(**totals).order_by("-day")),
        "by_key": list(
            rows.values("api_key__name", "api_key__prefix").annotate(**totals).order_by("-calls")
        ),
        "by_model": list(
            rows.values("model_id", "model__name").annotate(**totals).order_by("-calls")
        ),
    }


def deployment_usage_by_day(*, deployment: Deployment, days: int = 14) -> list[dict]:
    """Calls, errors and the mean latency of the answered calls (ms; None when none was
    answered) per day of the deployment's endpoint, newest first."""
    answered = NullIf(Sum("calls") - Sum("errors"), 0)
    return list(
        UsageDay.objects.filter(deployment=deployment)
        .values("day")
        .annotate(mean_ms=Sum("total_ms") / answered)  # before calls and errors take the names
        .annotate(calls=Sum("calls"), errors=Sum("errors"))
        .order_by("-day")[:days]
    )


def models_for_table(*, workspace: Workspace) -> QuerySet[TrainedModel]:
    """The workspace's models with their main metric (per task, as runs are compared) and
    whether a deployment serves them, computed in PostgreSQL."""
    metric = Case(
        *[When(task=task, then=KT(f"metrics__{key}")) for task, (key, _) in MAIN_METRIC.items()]
    )
    return training_selectors.model_list(workspace=workspace).annotate(
        main_metric=Cast(metric, FloatField()),
        deployed=Exists(Deployment.objects.filter(model=OuterRef("pk"))),
    )


# --- public models (the demo) -----------------------------------------------------------------


class PublicModelAccess(WorkspaceAccess):
    """A signed-in person trying another workspace's public model: they may run predictions
    with it, and nothing else of that workspace is theirs (404, as for a stranger)."""

    def can(self, perm: Perm) -> bool:
        return perm == Perm.PREDICT

    def require(self, perm: Perm) -> None:
        if perm != Perm.PREDICT:
            raise Http404("No such model.")


def model_public_access(*, user: User, model: TrainedModel) -> WorkspaceAccess:
    """The access of anyone signed in to a public `model` (TrainedModel.is_public); a model
    that is not public is 404 with the words an unknown id gets."""
    if not user.is_authenticated or not model.is_public:
        raise Http404("No such model.")
    return PublicModelAccess(
        workspace=model.workspace, user=user, role="", perms=frozenset({Perm.PREDICT})
    )


def models_public() -> QuerySet[TrainedModel]:
    """Models anyone signed in may try, with the dataset their version was saved from."""
    return (
        TrainedModel.objects.usable()
        .filter(is_public=True)
        .select_related("workspace", "dataset_version__dataset")
    )


def model_public_get(*, pk: int) -> TrainedModel:
    model = models_public().filter(pk=pk).first()
    if model is None:
        raise Http404("No such model.")
    return model


def models_public_for_dataset(*, dataset: Dataset) -> list[TrainedModel]:
    """The public models trained on `dataset` (a public one), the project's current first."""
    models = list(
        models_public()
        .filter(dataset_version__dataset=dataset, workspace=dataset.workspace)
        .order_by("-is_current", "-created_at", "-pk")
    )
    for model in models:
        key, model.main_metric_label = MAIN_METRIC.get(model.task, ("", "metric"))
        model.main_metric = model.metrics.get(key)
    return models


def model_public_samples(*, model: TrainedModel) -> list[Image]:
    """A few val images of the model's dataset to try it on, when that dataset is public."""
    version = model.dataset_version
    if version is None or not version.dataset.is_public:
        return []
    return list(
        Image.objects.filter(dataset=version.dataset, split="val")
        .select_related("dataset")
        .order_by("pk")[:PUBLIC_SAMPLE_IMAGES]
    )
