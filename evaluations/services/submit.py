"""Starting an evaluation: which versions a model can be evaluated on, how its classes pair
with a version's (by name, or as the person mapped them), and the refusals, each with its
reason, before anything is queued."""

from django.db import IntegrityError, transaction
from django.http import Http404

from core.errors import ServiceError
from core.leases import queued_until
from core.tasks import task_send_on_commit
from datasets.models import PIXEL_TASKS, DatasetVersion, Split, Task
from datasets.services.versions import version_manifest_load
from evaluations.models import Evaluation
from training.models import InspectState, TrainedModel
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

IMGSZ_MIN, IMGSZ_MAX = 32, 4096
# What the mapping form sends for a model class no version class stands for.
IGNORE = "__ignore__"


def version_class_names(version: DatasetVersion) -> list[str]:
    """The version's class names: from its summary, or its manifest for a version frozen
    before the summary kept them."""
    per_class = (version.summary or {}).get("labels_per_class")
    if isinstance(per_class, dict):
        return sorted(per_class)
    return list(version_manifest_load(version)["classes"])


def version_split_images(version: DatasetVersion) -> dict[str, int]:
    splits = (version.summary or {}).get("splits") or {}
    return {s: int(splits.get(s) or 0) for s in Split.values if splits.get(s)}


def evaluation_refusal(*, model: TrainedModel, version: DatasetVersion) -> str:
    """Why `model` cannot be evaluated on `version` whatever classes are paired; "" if it can."""
    dataset = version.dataset
    if model.inspect_state == InspectState.PENDING:
        return f"{model.name} is still being inspected; evaluate it once its check has finished."
    if model.inspect_state == InspectState.FAILED:
        return f"{model.name} failed its inspection, so Kestrel does not load it."
    if not model.weights_key:
        return f"{model.name} has no stored weights to evaluate."
    if model.task != dataset.task:
        return (
            f"{model.name} is a {Task(model.task).label.lower()} model and {dataset.name} is a "
            f"{Task(dataset.task).label.lower()} dataset: pick a version of a "
            f"{Task(model.task).label.lower()} dataset."
        )
    if model.task == Task.DEPTH:
        return ""  # a depth map has no classes to pair
    if not model.class_names:
        return f"Kestrel does not know the classes of {model.name}, so it cannot pair them."
    return ""


def class_pairing_needed(model: TrainedModel) -> bool:
    """Whether the model's classes are paired with the version's: all tasks but depth, whose
    maps hold metres, not classes."""
    return model.task != Task.DEPTH


def class_guess(model_names: list[str], version_names: list[str]) -> list[str | None]:
    """Each model class's counterpart in the version by name: the same name, else the same
    name up to case and surrounding spaces; None where there is none."""
    exact = set(version_names)
    folded: dict[str, str] = {}
    for name in version_names:
        folded.setdefault(name.strip().casefold(), name)
    return [name if name in exact else folded.get(name.strip().casefold()) for name in model_names]


def class_map_resolve(
    *,
    model_names: list[str],
    version_names: list[str],
    chosen: list[str] | None,
    version_label: str,
) -> list[dict]:
    """The pairing stored on the evaluation: per model class {model, version} (version None:
    ignored). `chosen` is None for "by name": every model class must then have a class of the
    same name. Otherwise one entry per model class: a version class name, IGNORE,
    or "" (not chosen). ServiceError names the classes that cannot be paired."""
    if chosen is None:
        guess = class_guess(model_names, version_names)
        missing = [m for m, v in zip(model_names, guess, strict=True) if v is None]
        if missing:
            raise ServiceError(
                f"{_listed(missing)} of the model {_have(missing)} no class of the same name in "
                f"{version_label}: map each to a class of the version, or ignore it."
            )
        targets: list[str | None] = list(guess)
    else:
        if len(chosen) != len(model_names):
            raise ServiceError("Pair every class of the model with a class of the version.")
        known = set(version_names)
        unset = [m for m, c in zip(model_names, chosen, strict=True) if not c]
        if unset:
            raise ServiceError(
                f"{_listed(unset)} of the model {_have(unset)} no counterpart chosen: map each "
                f"to a class of {version_label}, or ignore it."
            )
        unknown = sorted({c for c in chosen if c != IGNORE and c not in known})
        if unknown:
            raise ServiceError(f"{_listed(unknown)} {_be(unknown)} not a class of {version_label}.")
        targets = [None if c == IGNORE else c for c in chosen]
    twice = sorted({t for t in targets if t is not None and targets.count(t) > 1})
    if twice:
        raise ServiceError(
            f"{_listed(twice)} of {version_label} {_be(twice, 'is', 'are')} paired with more than "
            "one class of the model; each version class can stand for one model class only."
        )
    if all(t is None for t in targets):
        raise ServiceError(
            f"No class of the model is paired with a class of {version_label}: there is nothing "
            "to evaluate."
        )
    return [{"model": m, "version": t} for m, t in zip(model_names, targets, strict=True)]


def _listed(names: list[str]) -> str:
    shown = ", ".join(f"“{n}”" for n in names[:10])
    return shown + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def _have(names: list[str]) -> str:
    return "has" if len(names) == 1 else "have"


def _be(names: list[str], one: str = "is", many: str = "are") -> str:
    return one if len(names) == 1 else many


@transaction.atomic
def evaluation_submit(
    *,
    access: WorkspaceAccess,
    model: TrainedModel,
    version: DatasetVersion,
    split: str = Split.VAL,
    class_map: list[str] | None = None,
    imgsz: int | None = None,
) -> Evaluation:
    """Queue an evaluation of `model` on `split` of `version` (both of the caller's workspace:
    another's is not found, as an unknown one is). `class_map`: see class_map_resolve."""
    access.require(Perm.TRAIN)
    if not access.owns(model):
        raise Http404("No such model.")
    if version.dataset.workspace_id != access.workspace.pk:
        raise Http404("No such dataset version.")
    refusal = evaluation_refusal(model=model, version=version)
    if refusal:
        raise ServiceError(refusal)
    label = f"{version.dataset.name} v{version.number}"
    splits = version_split_images(version)
    if split not in Split.values:
        raise ServiceError(f"“{split[:20]}” is not a split; pick train, val or test.")
    if not splits.get(split):
        raise ServiceError(f"{label} has no images in its {split} split.")
    if class_pairing_needed(model):
        pairs = class_map_resolve(
            model_names=[str(n) for n in model.class_names],
            version_names=version_class_names(version),
            chosen=class_map,
            version_label=label,
        )
    else:
        pairs = []
    summary = version.summary or {}
    per_class = summary.get("labels_per_class")
    if model.task in PIXEL_TASKS:
        # Their truth is one map per image (a PNG mask or depth map), not labels per class.
        what = "depth map" if model.task == Task.DEPTH else "semantic mask"
        if not summary.get("masks"):
            raise ServiceError(f"{label} has no {what} to compare the model's with.")
        per_split = summary.get("masks_per_split")  # absent from versions saved before it
        if isinstance(per_split, dict) and not per_split.get(split):
            raise ServiceError(
                f"The {split} split of {label} has no {what} to compare the model's with; "
                f"pick a split that has ({', '.join(sorted(per_split))})."
            )
    elif isinstance(per_class, dict) and not any(
        per_class.get(p["version"]) for p in pairs if p["version"]
    ):
        raise ServiceError(f"No class of {label} paired with the model has a label to compare.")
    size = imgsz if imgsz is not None else (model.imgsz or 640)
    if not IMGSZ_MIN <= size <= IMGSZ_MAX:
        raise ServiceError(f"The image size must be between {IMGSZ_MIN} and {IMGSZ_MAX}.")
    busy = f"{model.name} is already being evaluated on the {split} split of {label}."
    # Deleting the model waits for this start; two clicks at once wait for each other, and the
    # constraint holds where rows are not locked (SQLite).
    TrainedModel.objects.select_for_update().filter(pk=model.pk).first()
    active = Evaluation.objects.active().filter(model=model, dataset_version=version, split=split)
    if active.exists():
        raise ServiceError(busy)
    try:
        with transaction.atomic():
            evaluation = Evaluation.objects.create(
                workspace=access.workspace,
                project_id=model.project_id,
                model=model,
                dataset_version=version,
                split=split,
                task=model.task,
                class_map=pairs,
                imgsz=size,
                created_by=access.user,
                lease_until=queued_until(),
            )
    except IntegrityError:  # a start at the same moment won
        raise ServiceError(busy) from None
    task_send_on_commit("evaluations.evaluation_run", evaluation.pk)
    return evaluation
