"""The training form: parses what a person typed; services decide whether it can train."""

from decimal import Decimal

from django import forms
from django.conf import settings

from datasets.models import DatasetVersion, Task
from training.estimator import version_images
from training.models import ModelFamily, ModelSize, TrainedModel, WeightsSource
from training.pretrained_fetch import SourceReach, weights_source_reach
from training.recipes import RECIPES, SMALL_DATASET_IMAGES, Recipe, recipe_default
from training.services.arguments import (
    PretrainedWeights,
    TrainParams,
    pretrained_weights_find,
    ultralytics_config,
)


def version_label(version: DatasetVersion) -> str:
    summary = version.summary or {}
    images, labels = summary.get("images", 0), summary.get("labels", 0)
    return (
        f"{version.dataset.name} v{version.number} "
        f"({images} image{'s' if images != 1 else ''}, {labels} label{'s' if labels != 1 else ''})"
    )


class VersionChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: DatasetVersion) -> str:
        return version_label(obj)


class BatchField(forms.CharField):
    """“auto” (or empty) for Ultralytics' AutoBatch, else a whole number."""

    def to_python(self, value) -> int:
        text = (super().to_python(value) or "").strip().lower()
        if text in ("", "auto", "-1"):
            return -1
        try:
            return int(text)
        except ValueError:
            raise forms.ValidationError("Batch is “auto” or a whole number, e.g. 16.") from None


class WeightsSelect(forms.RadioSelect):
    """Where the weights come from; a source this server cannot give now is shown disabled
    (the form says why next to it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.unavailable: set[str] = set()

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        if value in self.unavailable:
            option["attrs"] = {**option["attrs"], "disabled": True}
            option["attrs"].pop("checked", None)
            option["selected"] = False
        return option


class TrainForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "Optional, e.g. “baseline”"}),
    )
    dataset_version = VersionChoiceField(
        queryset=DatasetVersion.objects.none(),
        empty_label=None,
        error_messages={"invalid_choice": "Pick a dataset version from the list."},
    )
    task = forms.ChoiceField(
        choices=[("", "The dataset's task"), *Task.choices],
        required=False,
        help_text="Usually the dataset's own task.",
    )
    model_family = forms.ChoiceField(choices=ModelFamily.choices, initial=ModelFamily.YOLO26)
    model_size = forms.ChoiceField(choices=ModelSize.choices, initial=ModelSize.N)
    weights = forms.ChoiceField(
        choices=WeightsSource.choices, initial=WeightsSource.PRETRAINED, widget=WeightsSelect
    )
    base_model = forms.ChoiceField(
        required=False,
        label="Model to fine-tune",
        help_text="Only with “A previous Kestrel model”, whose own family and size it keeps.",
    )
    recipe = forms.ChoiceField(
        choices=[(r.slug, r.name) for r in RECIPES],
        required=False,
        widget=forms.RadioSelect,
        help_text="A recipe fills the fields below; change any of them before you start.",
        error_messages={"invalid_choice": "Pick a recipe from the list."},
    )
    epochs = forms.IntegerField(initial=100)
    imgsz = forms.IntegerField(
        label="Image size", initial=640, help_text="Pixels, a multiple of 32."
    )
    batch = BatchField(initial="auto", required=False, help_text="“auto” or images per batch.")
    patience = forms.IntegerField(
        initial=100, help_text="Epochs without improvement before stopping early (0: never)."
    )
    optimizer = forms.ChoiceField(initial="auto")
    seed = forms.IntegerField(initial=0)
    gpu_type = forms.IntegerField(
        required=False, error_messages={"invalid": "Pick a machine from the list."}
    )
    extra_args = forms.CharField(
        required=False,
        label="Ultralytics arguments",
        widget=forms.Textarea(attrs={"rows": 6, "placeholder": "lr0: 0.001\nmosaic: 0.5"}),
        help_text="YAML, one “name: value” per line.",
    )
    notify_email = forms.BooleanField(required=False, label="Email me when it ends")
    budget_cap = forms.DecimalField(
        required=False,
        min_value=Decimal("0.01"),
        max_value=Decimal("1000000"),
        decimal_places=2,
        label="Budget cap (credits)",
        help_text="Optional: the job stops, keeping its checkpoints, once it has spent this much.",
    )

    def __init__(self, *args, versions, models, recipes: list[Recipe] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset_version"].queryset = versions
        # The workspace's own recipes after the built-in ones: only its own are choices, so
        # another workspace's id is refused as an unknown one is.
        self.recipe_list = [*RECIPES, *recipes]
        self.fields["recipe"].choices = [(r.slug, r.name) for r in self.recipe_list]
        self.models = {str(m.pk): m for m in models}
        grouped: dict[str, list] = {}
        for model in models:
            grouped.setdefault(Task(model.task).label, []).append((str(model.pk), model.name))
        self.fields["base_model"].choices = [("", "—"), *grouped.items()]
        self.fields["optimizer"].choices = [(n, n) for n in ultralytics_config().optimizers]
        self.version_tasks = {str(v.pk): v.dataset.task for v in versions}
        self.version_train_images = {str(v.pk): version_images(v)[0] for v in versions}
        # Whether a download can work, asked once in a while and only where downloads are on.
        self.reach: SourceReach | None = (
            weights_source_reach() if settings.TRAINING_ALLOW_DOWNLOADS else None
        )
        # The pretrained weights of the model the form shows: offered when this server has them
        # or may download them; the default only when they are here or the download's source
        # answered, else "From scratch", which always runs (weights_note says why).
        self.pretrained = pretrained_weights_find(*self._model_shown())
        self.pretrained_note = self.weights_note(self.pretrained)
        if not self.pretrained.available:
            self.fields["weights"].widget.unavailable = {WeightsSource.PRETRAINED}
        if not self.is_bound:
            if "weights" not in self.initial:
                default = (
                    WeightsSource.PRETRAINED
                    if self.weights_ready(self.pretrained)
                    else WeightsSource.SCRATCH
                )
                self.initial = {**self.initial, "weights": default}
            self._recipe_initial()

    def weights_ready(self, found: PretrainedWeights) -> bool:
        """Pretrained weights a job will surely get: here, or a download seen to work."""
        return found.present or (
            found.downloadable and self.reach is not None and self.reach.reachable
        )

    def weights_note(self, found: PretrainedWeights) -> str:
        """What the form says of the pretrained choice for one model."""
        if not found.downloadable or self.reach is None:
            return found.note
        if self.reach.reachable:
            return (
                f"{found.name} is downloaded from {self.reach.host} when the job starts "
                f"({self.reach.sentence})"
            )
        return (
            f"{found.name} would be downloaded from {self.reach.host} when the job starts, but "
            f"{self.reach.sentence}, so “From scratch” is the default: it needs nothing. Put "
            f"{found.name} in {found.folder} to start from it"
        )

    def _recipe_initial(self) -> None:
        """The default recipe for the version and weights shown, and the fields it fills."""
        version = self["dataset_version"].value()
        train_images = self.version_train_images.get(str(getattr(version, "pk", version)), 0)
        recipe = recipe_default(train_images=train_images, weights=self.initial["weights"])
        filled = {"recipe": recipe.slug, **recipe.fields(train_images=train_images)}
        self.initial = {**filled, **self.initial}

    def _model_shown(self) -> tuple[str, str, str]:
        """(family, size, task) as the form shows them now, read leniently."""
        family, size = self["model_family"].value(), self["model_size"].value()
        version = self["dataset_version"].value()
        task = self["task"].value() or self.version_tasks.get(str(getattr(version, "pk", version)))
        return (
            family if family in ModelFamily.values else ModelFamily.YOLO26,
            size if size in ModelSize.values else ModelSize.N,
            task if task in Task.values else Task.DETECT,
        )

    def pretrained_choices(self) -> dict:
        """For the page's script: what the weights choice says for each family, size and task
        (the same function the submit and the supervisor ask), and each version's task."""
        weights = {}
        for family in ModelFamily.values:
            for size in ModelSize.values:
                for task in Task.values:
                    found: PretrainedWeights = pretrained_weights_find(family, size, task)
                    weights[f"{family} {size} {task}"] = {
                        "available": found.available,
                        "ready": self.weights_ready(found),
                        "note": self.weights_note(found),
                    }
        return {
            "weights": weights,
            "version_tasks": self.version_tasks,
            "version_train_images": self.version_train_images,
            "recipes": {
                r.slug: {"fields": r.fields(train_images=0), "batch": r.batch}
                for r in self.recipe_list
            },
            "small_dataset_images": SMALL_DATASET_IMAGES,
        }

    def recipes(self) -> list[dict]:
        """Each recipe with its radio and the arguments it sets, for the template."""
        radios = {str(radio.data["value"]): radio for radio in self["recipe"]}
        return [
            {"recipe": r, "radio": radios[r.slug], "saved": r not in RECIPES}
            for r in self.recipe_list
        ]

    def clean(self):
        data = super().clean()
        if data.get("weights") == WeightsSource.PRETRAINED and data.get("dataset_version"):
            task = data.get("task") or data["dataset_version"].dataset.task
            family, size = data.get("model_family"), data.get("model_size")
            if family and size:
                found = pretrained_weights_find(family, size, task)
                if not found.available:
                    self.add_error(
                        "weights",
                        f"No pretrained weights: {found.reason}. Pick “From scratch”, or ask "
                        "whoever runs this server to put the file there.",
                    )
        return data

    def clean_base_model(self) -> TrainedModel | None:
        return self.models.get(self.cleaned_data.get("base_model") or "")

    def params(self, *, extra_args: dict) -> TrainParams:
        data = self.cleaned_data
        return train_params_of(
            data,
            task=data["task"] or data["dataset_version"].dataset.task,
            seed=data["seed"],
            extra_args=extra_args,
        )


def train_params_of(data: dict, *, task: str, seed: int, extra_args: dict) -> TrainParams:
    """The run's settings from a form's cleaned model, weights and training fields (the
    training form's, a sweep's shared settings)."""
    return TrainParams(
        task=task,
        model_family=data["model_family"],
        model_size=data["model_size"],
        weights=data["weights"],
        epochs=data["epochs"],
        imgsz=data["imgsz"],
        batch=data["batch"],
        patience=data["patience"],
        optimizer=data["optimizer"],
        seed=seed,
        extra_args=extra_args,
    )


COMPARE_MIN, COMPARE_MAX = 2, 8


class RunIdsField(forms.Field):
    """Repeated ?jobs=<id>: the ids in the order given, each once."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[int]:
        ids: list[int] = []
        for raw in value or []:
            text = str(raw).strip()
            if not (text.isascii() and text.isdigit() and len(text) <= 18):
                raise forms.ValidationError(f"“{text[:20]}” is not a run id.")
            if int(text) not in ids:
                ids.append(int(text))
        return ids


class CompareForm(forms.Form):
    jobs = RunIdsField(
        error_messages={"required": f"Tick at least {COMPARE_MIN} runs to compare."},
    )

    def clean_jobs(self) -> list[int]:
        ids = self.cleaned_data["jobs"]
        if len(ids) < COMPARE_MIN:
            raise forms.ValidationError(
                f"Tick at least {COMPARE_MIN} runs to compare; you ticked {len(ids)}."
            )
        if len(ids) > COMPARE_MAX:
            raise forms.ValidationError(
                f"Compare at most {COMPARE_MAX} runs at once; you ticked {len(ids)}."
            )
        return ids
