"""A deployment's collection rule: the form, the checks at submit, what its page shows."""

import logging
from datetime import UTC, datetime

from django import forms
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from core.errors import ServiceError
from datasets.models import Blob, Dataset, Image, Task
from deploy.models import CollectedImage, CollectionRule, Deployment
from deploy.ratelimit import _redis
from training.models import TrainedModel
from workspaces.models import Workspace
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

# Tasks whose answers carry a confidence per prediction (semantic and depth answer per pixel).
COLLECT_TASKS = (Task.DETECT, Task.SEGMENT, Task.POSE, Task.OBB, Task.CLASSIFY)
MAX_CAP = 100_000


def count_key(rule_id: int, day: str) -> str:
    """The Redis counter of the images a rule handed on during one UTC day."""
    return f"kestrel:collect:count:{rule_id}:{day}"


def utc_day(now: datetime | None = None) -> str:
    return (now or timezone.now()).astimezone(UTC).date().isoformat()


class CollectionRuleForm(forms.Form):
    """The rule as a person edits it; the service checks what depends on the data."""

    enabled = forms.BooleanField(required=False, label="Collect images")
    dataset = forms.IntegerField(required=False, min_value=1, label="Into dataset")
    conf_min = forms.FloatField(min_value=0, max_value=1, initial=0.25, label="Confidence from")
    conf_max = forms.FloatField(min_value=0, max_value=1, initial=0.6, label="to")
    classes = forms.MultipleChoiceField(required=False, label="Only these classes")
    sample_rate = forms.FloatField(min_value=0, max_value=1, initial=1.0, label="Sampling rate")
    daily_cap = forms.IntegerField(
        min_value=1, max_value=MAX_CAP, initial=100, label="At most, per UTC day"
    )

    def __init__(self, *args, class_names: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["classes"].choices = [(name, name) for name in class_names]

    def errors_text(self) -> str:
        return " ".join(
            f"{self.fields[name].label}: {' '.join(errors)}"
            if name in self.fields
            else " ".join(errors)
            for name, errors in self.errors.items()
        )


def _source_model(deployment: Deployment | None, model: TrainedModel | None) -> TrainedModel:
    if (deployment is None) == (model is None):
        raise ValueError("a collection rule is for one deployment or one model")
    return deployment.model if deployment is not None else model


@transaction.atomic
def collection_rule_save(
    *,
    access: WorkspaceAccess,
    deployment: Deployment | None = None,
    model: TrainedModel | None = None,
    enabled: bool,
    dataset_id: int | None,
    conf_min: float,
    conf_max: float,
    classes: list[str],
    sample_rate: float,
    daily_cap: int,
) -> CollectionRule:
    """Save the collection rule of a dedicated endpoint, or of a model on the shared API.
    Refused with the reason: a dataset not of this workspace (as an unknown one), of another
    task, without the chosen classes; a band that is empty or outside 0-1; a rate outside
    (0, 1]; classes the model does not have."""
    access.require(Perm.WRITE)
    served = _source_model(deployment, model)
    if not access.owns(deployment or model):
        raise ServiceError("No such deployment.")
    if not (0 <= conf_min < conf_max <= 1):
        raise ServiceError(
            f"The confidence band must lie within 0 to 1, its lowest below its highest "
            f"(not {conf_min:g} to {conf_max:g})."
        )
    if not 0 < sample_rate <= 1:
        raise ServiceError(f"The sampling rate is above 0 and at most 1, not {sample_rate:g}.")
    if not 1 <= daily_cap <= MAX_CAP:
        raise ServiceError(f"The daily cap is between 1 and {MAX_CAP} images.")
    known = {str(name).lower(): str(name) for name in served.class_names or []}
    unknown = [c for c in classes if c.lower() not in known]
    if unknown:
        raise ServiceError(f"“{unknown[0]}” is not a class of {served.name}.")
    classes = sorted({known[c.lower()] for c in classes})
    dataset = None
    if dataset_id:
        dataset = Dataset.objects.for_workspace(access.workspace).filter(pk=dataset_id).first()
        if dataset is None:
            raise ServiceError("No such dataset in this workspace.")
    if enabled:
        _target_check(served, dataset, classes)
    if deployment is not None:
        rule, _ = CollectionRule.objects.select_for_update().get_or_create(
            deployment=deployment, defaults={"workspace": access.workspace}
        )
    else:
        rule, _ = CollectionRule.objects.select_for_update().get_or_create(
            model=model, deployment=None, defaults={"workspace": access.workspace}
        )
    rule.enabled, rule.dataset = enabled, dataset
    rule.conf_min, rule.conf_max, rule.classes = conf_min, conf_max, classes
    rule.sample_rate, rule.daily_cap = sample_rate, daily_cap
    rule.storage_full_at = None  # a saved rule tries at once
    rule.updated_by = access.user
    rule.save()
    return rule


def _target_check(model: TrainedModel, dataset: Dataset | None, classes: list[str]) -> None:
    if model.task not in COLLECT_TASKS:
        raise ServiceError(
            f"{model.name} is a {model.get_task_display().lower()} model: it answers per pixel, "
            "with no confidence to choose images by, so it cannot collect them."
        )
    if dataset is None:
        raise ServiceError("Choose the dataset the collected images go to.")
    if dataset.task != model.task:
        raise ServiceError(
            f"“{dataset.name}” is a {dataset.get_task_display().lower()} dataset; "
            f"{model.name}'s predictions are {model.get_task_display().lower()} ones."
        )
    present = {n.lower() for n in dataset.classes.values_list("name", flat=True)}
    missing = [c for c in classes if c.lower() not in present]
    if missing:
        raise ServiceError(
            f"“{dataset.name}” has no class “{missing[0]}”: add it to the dataset, or leave "
            "it out of the rule."
        )
    if not any(str(n).lower() in present for n in model.class_names or []):
        raise ServiceError(
            f"None of {model.name}'s classes is a class of “{dataset.name}”, so its "
            "predictions could not be suggested there."
        )


def collection_rule_of(
    *, deployment: Deployment | None = None, model: TrainedModel | None = None
) -> CollectionRule | None:
    if deployment is not None:
        return (
            CollectionRule.objects.filter(deployment=deployment).select_related("dataset").first()
        )
    return (
        CollectionRule.objects.filter(model=model, deployment=None)
        .select_related("dataset")
        .first()
    )


def collection_panel(
    *, access: WorkspaceAccess, deployment: Deployment | None = None, model=None
) -> dict:
    """What a deployment's page (or a model's try-it page, for the shared API) shows of its
    collection rule, and the form to edit it."""
    served = _source_model(deployment, model)
    rule = collection_rule_of(deployment=deployment, model=model)
    collected = CollectedImage.objects.filter(workspace=access.workspace)
    collected = (
        collected.filter(deployment=deployment)
        if deployment is not None
        else collected.filter(model=model, deployment=None)
    )
    initial = {}
    if rule is not None:
        initial = {
            "enabled": rule.enabled,
            "dataset": rule.dataset_id,
            "conf_min": rule.conf_min,
            "conf_max": rule.conf_max,
            "classes": rule.classes,
            "sample_rate": rule.sample_rate,
            "daily_cap": rule.daily_cap,
        }
    today = 0
    if rule is not None:
        try:
            today = int(_redis().get(count_key(rule.pk, utc_day())) or 0)
        except Exception:  # a page never fails for a figure
            logger.warning("collection count of rule %s unreadable", rule.pk, exc_info=True)
    plan = access.workspace.plan
    return {
        "rule": rule,
        "collecting": bool(rule and rule.enabled and rule.dataset_id),
        "supported": served.task in COLLECT_TASKS,
        "form": CollectionRuleForm(initial=initial, class_names=list(served.class_names or [])),
        "datasets": Dataset.objects.for_workspace(access.workspace)
        .filter(task=served.task)
        .order_by("name"),
        "today": min(today, rule.daily_cap) if rule else 0,
        "collected_total": collected.count(),
        "storage_full": bool(rule and rule.storage_full_at),
        "storage_used": workspace_storage_bytes(access.workspace)
        if rule and rule.storage_full_at
        else None,
        "storage_quota": getattr(plan, "storage_quota_bytes", None),
    }


def workspace_storage_bytes(workspace: Workspace) -> int:
    """Bytes the workspace holds: each image blob its datasets use (once), and its models'
    weights. The plan's storage_quota_bytes is counted against this."""
    images = Blob.objects.filter(
        pk__in=Image.objects.filter(dataset__workspace=workspace).values("blob_id")
    ).aggregate(n=Sum("size"))["n"]
    weights = TrainedModel.objects.filter(workspace=workspace).aggregate(n=Sum("weights_size"))["n"]
    return int(images or 0) + int(weights or 0)
