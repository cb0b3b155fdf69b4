"""The sweep form: parses what a person typed into a search space and a sweep's settings; the
services decide whether it can run (sweeps.services.submit)."""

from decimal import Decimal

from django import forms

from core.errors import ServiceError
from datasets.models import DatasetVersion, Task
from sweeps.services.space import space_parse
from sweeps.services.submit import MAX_TRIALS, metric_choices
from training.forms import BatchField, VersionChoiceField, train_params_of
from training.models import ModelFamily, ModelSize, WeightsSource
from training.services.arguments import TrainParams, extra_args_parse, ultralytics_config

# The ranges the form offers a row each for: argument → (label, log by default).
RANGES = {
    "lr0": ("Learning rate (lr0)", True),
    "epochs": ("Epochs", False),
    "mosaic": ("Mosaic", False),
    "fliplr": ("Horizontal flip (fliplr)", False),
    "hsv_h": ("Hue shift (hsv_h)", False),
}
INT_RANGES = {"epochs"}


def _metric_options() -> list[tuple[str, str]]:
    seen: dict[str, list[str]] = {}
    labels = {}
    for task in Task.values:
        for key, label, _ in metric_choices(task):
            seen.setdefault(key, []).append(Task(task).label.lower())
            labels[key] = label
    return [("", "The task's main metric")] + [
        (key, f"{labels[key]} — {key} ({', '.join(tasks)})") for key, tasks in seen.items()
    ]


class SweepForm(forms.Form):
    name = forms.CharField(max_length=100, required=False)
    dataset_version = VersionChoiceField(
        queryset=DatasetVersion.objects.none(),
        empty_label=None,
        error_messages={"invalid_choice": "Pick a dataset version from the list."},
    )
    model_family = forms.ChoiceField(choices=ModelFamily.choices, initial=ModelFamily.YOLO26)
    model_size = forms.ChoiceField(
        choices=ModelSize.choices, initial=ModelSize.N, help_text="Unless sizes are searched."
    )
    weights = forms.ChoiceField(
        choices=WeightsSource.choices, initial=WeightsSource.SCRATCH, widget=forms.RadioSelect
    )
    base_model = forms.ChoiceField(
        required=False,
        label="Model to fine-tune",
        help_text="Only with “A previous Kestrel model”: every trial starts from it, keeping "
        "its family and size.",
        error_messages={"invalid_choice": "Pick a model from the list."},
    )
    gpu_type = forms.IntegerField(error_messages={"invalid": "Pick a machine from the list."})
    metric = forms.ChoiceField(required=False)
    n_trials = forms.IntegerField(label="Trials", min_value=1, max_value=MAX_TRIALS, initial=8)
    parallel = forms.IntegerField(
        label="At once", min_value=1, max_value=MAX_TRIALS, initial=2,
        help_text="Trials running at the same time, within the plan's jobs at a time.",
    )  # fmt: skip
    budget = forms.DecimalField(
        label="Budget (credits)",
        min_value=Decimal("0"),
        max_value=Decimal("1000000"),
        decimal_places=2,
        help_text="What all the trials together may spend.",
    )
    seed = forms.IntegerField(
        required=False, min_value=0, help_text="Blank: the sweep's own number."
    )
    prune = forms.BooleanField(
        required=False,
        initial=True,
        label="Stop poor trials early",
        help_text="Optuna's median pruner: a trial doing worse after an epoch than the median "
        "of finished trials at that epoch is stopped.",
    )
    prune_startup_trials = forms.IntegerField(min_value=1, max_value=50, initial=2)
    prune_warmup_epochs = forms.IntegerField(min_value=0, max_value=1000, initial=1)
    # What every trial shares (unless searched below).
    epochs = forms.IntegerField(initial=30, min_value=1)
    imgsz = forms.IntegerField(label="Image size", initial=640)
    batch = BatchField(initial="auto", required=False)
    patience = forms.IntegerField(initial=100, min_value=0)
    optimizer = forms.ChoiceField(initial="auto")
    train_seed = forms.IntegerField(label="Training seed", initial=0, min_value=0)
    extra_args = forms.CharField(
        required=False,
        label="Fixed Ultralytics arguments",
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "warmup_epochs: 1"}),
    )
    # The search space.
    imgsz_list = forms.CharField(
        required=False, label="Image sizes", help_text="A list, e.g. 320, 480, 640."
    )
    model_sizes = forms.MultipleChoiceField(
        required=False,
        choices=ModelSize.choices,
        widget=forms.CheckboxSelectMultiple,
        label="Model sizes",
    )
    optimizers = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Optimizers"
    )
    more_space = forms.CharField(
        required=False,
        label="Other arguments to search",
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "mixup: {low: 0.0, high: 0.3}\ncos_lr: [true, false]"}
        ),
        help_text="YAML: a list of values, or a range {low, high, log}.",
    )

    def __init__(self, *args, versions, models=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["dataset_version"].queryset = versions
        # The workspace's usable models, as the training form offers them: another
        # workspace's id is not a choice, so it is refused as an unknown one is.
        self.models = {str(m.pk): m for m in models}
        grouped: dict[str, list] = {}
        for model in models:
            grouped.setdefault(Task(model.task).label, []).append((str(model.pk), model.name))
        self.fields["base_model"].choices = [("", "—"), *grouped.items()]
        optimizers = [(n, n) for n in ultralytics_config().optimizers]
        self.fields["optimizer"].choices = optimizers
        self.fields["optimizers"].choices = [o for o in optimizers if o[0] != "auto"]
        self.fields["metric"].choices = _metric_options()
        for name, (label, log) in RANGES.items():
            number = forms.IntegerField if name in INT_RANGES else forms.FloatField
            self.fields[f"{name}_low"] = number(required=False, label=f"{label} from")
            self.fields[f"{name}_high"] = number(required=False, label="to")
            self.fields[f"{name}_log"] = forms.BooleanField(
                required=False, initial=log, label="log"
            )

    def range_rows(self) -> list[dict]:
        return [
            {
                "name": name,
                "label": label,
                "low": self[f"{name}_low"],
                "high": self[f"{name}_high"],
                "log": self[f"{name}_log"],
            }
            for name, (label, _) in RANGES.items()
        ]

    def clean_base_model(self):
        return self.models.get(self.cleaned_data.get("base_model") or "")

    def clean_imgsz_list(self) -> list[int]:
        text = self.cleaned_data.get("imgsz_list") or ""
        sizes = []
        for part in text.replace(";", ",").split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit():
                raise forms.ValidationError(f"“{part[:20]}” is not a size in pixels.")
            sizes.append(int(part))
        return sizes

    def clean(self):
        data = super().clean()
        space: dict = {}
        for name in RANGES:
            low, high = data.get(f"{name}_low"), data.get(f"{name}_high")
            if low is None and high is None:
                continue
            if low is None or high is None:
                self.add_error(f"{name}_low", f"{name}: give both ends of the range.")
                continue
            space[name] = {"low": low, "high": high, "log": bool(data.get(f"{name}_log"))}
        if data.get("imgsz_list"):
            space["imgsz"] = {"choices": data["imgsz_list"]}
        if data.get("model_sizes"):
            space["model_size"] = {"choices": list(data["model_sizes"])}
        if data.get("optimizers"):
            space["optimizer"] = {"choices": list(data["optimizers"])}
        try:
            more = space_parse(data.get("more_space") or "")
        except ServiceError as e:
            self.add_error("more_space", str(e))
            more = {}
        for name, spec in more.items():
            if name in space:
                self.add_error("more_space", f"{name} is searched above already.")
            space[name] = spec
        try:
            data["extra_args_parsed"] = extra_args_parse(data.get("extra_args") or "")
        except ServiceError as e:
            self.add_error("extra_args", str(e))
        data["space"] = space
        return data

    def base_params(self) -> TrainParams:
        data = self.cleaned_data
        return train_params_of(
            data,
            task=data["dataset_version"].dataset.task,
            seed=data["train_seed"],
            extra_args=data.get("extra_args_parsed") or {},
        )
