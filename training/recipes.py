"""Training recipes: sets of arguments the training form offers, as data, each saying what it
sets. A recipe only fills the form's fields (epochs, image size, batch, patience, optimizer and
the Ultralytics arguments); what is submitted goes through train_params_validate like anything
typed, so a recipe can never start what the form would refuse.

The form picks one by default from the version's size and the weights (recipe_default). A
workspace adds its own (training.models.WorkspaceRecipe: a sweep's best settings, saved from the
sweep's page), offered after these; another workspace's are never offered, so its id is refused
as an unknown one is."""

from dataclasses import dataclass, field

from django.db.models import QuerySet
from django.http import Http404

from training.models import WeightsSource, WorkspaceRecipe
from training.services.arguments import TrainParams
from training.services.demo_model import DEMO_PARAMS
from workspaces.models import Workspace

# At most this many training images is a small dataset: the demo's recipe (100 images) is what
# works there from scratch; past it, Ultralytics' own defaults are the better start.
SMALL_DATASET_IMAGES = 1000


@dataclass(frozen=True)
class Recipe:
    slug: str
    name: str
    when: str  # when to pick it, in words
    epochs: int
    imgsz: int
    batch: int  # -1: Ultralytics' AutoBatch
    patience: int
    optimizer: str
    extra_args: dict = field(default_factory=dict)

    def fields(self, *, train_images: int) -> dict:
        """The form's fields as this recipe sets them for a version of `train_images`: a batch
        never larger than the training images (validation would refuse it)."""
        batch = self.batch
        if batch > 0 and train_images > 0:
            batch = min(batch, train_images)
        return {
            "epochs": self.epochs,
            "imgsz": self.imgsz,
            "batch": "auto" if batch == -1 else str(batch),
            "patience": self.patience,
            "optimizer": self.optimizer,
            "extra_args": extra_args_text(self.extra_args),
        }

    def arguments(self) -> str:
        """What it sets, as a line: "epochs 20, imgsz 128, batch 8, …, lr0 0.003"."""
        shown = {
            "epochs": self.epochs,
            "imgsz": self.imgsz,
            "batch": "auto" if self.batch == -1 else self.batch,
            "patience": self.patience,
            "optimizer": self.optimizer,
            **self.extra_args,
        }
        return ", ".join(f"{name} {_shown(value)}" for name, value in shown.items())

    def params(self, *, task: str, model_family: str, model_size: str, weights: str):
        """The recipe as a job's parameters (for checks and the demo's own)."""
        return TrainParams(
            task=task,
            model_family=model_family,
            model_size=model_size,
            weights=weights,
            epochs=self.epochs,
            imgsz=self.imgsz,
            batch=self.batch,
            patience=self.patience,
            optimizer=self.optimizer,
            seed=0,
            extra_args=dict(self.extra_args),
        )


def _shown(value) -> str:
    """A value as a recipe's line shows it: a float to six significant digits (a sweep's best
    lr0 0.048798203043577466 reads 0.0487982; the recipe still sets it whole)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def extra_args_text(args: dict) -> str:
    """The form's "Ultralytics arguments" box: YAML, one "name: value" a line."""
    return "".join(f"{name}: {value}\n" for name, value in args.items())


# The demo model's own settings (training/services/demo_model.py): a step per batch of 8, a
# higher rate than "auto" picks, one epoch of warm-up, the last epochs without mosaic; but 30
# epochs, not the demo's 20, for YOLO26n, the form's default model, which learns from scratch
# more slowly than the demo's YOLO11n. On the demo's images (bench/demo_train.py, val shapes
# found above 0.5): YOLO26n at 20 epochs 31 or 19 of 36 by seed, at 30 epochs 36 or 33;
# YOLO11n 35 at 20 or 30. Patience still ends a run early once it stops improving.
SMALL_FROM_SCRATCH = Recipe(
    slug="small-scratch",
    name="Small dataset from scratch",
    when="A few hundred images and no pretrained weights: the demo model's recipe.",
    epochs=30,
    imgsz=DEMO_PARAMS.imgsz,
    batch=DEMO_PARAMS.batch,
    patience=DEMO_PARAMS.patience,
    optimizer=DEMO_PARAMS.optimizer,
    extra_args=dict(DEMO_PARAMS.extra_args),
)
FINE_TUNE = Recipe(
    slug="fine-tune",
    name="Fine-tune pretrained",
    when="Starting from pretrained weights, at the size they were trained at.",
    epochs=50,
    imgsz=640,
    batch=-1,
    patience=10,
    optimizer="auto",
    # Mosaic off for the last epochs, as Ultralytics' default, but sooner on a short run.
    extra_args={"close_mosaic": 5},
)
FAST_CHECK = Recipe(
    slug="fast-check",
    name="Fast check",
    when="Minutes, not a useful model: does the data train at all?",
    epochs=3,
    imgsz=64,
    batch=16,
    patience=100,  # Ultralytics' default: three epochs are never cut short
    optimizer="auto",
)
ULTRALYTICS_DEFAULTS = Recipe(
    slug="defaults",
    name="Ultralytics' defaults",
    when=f"A large dataset (over {SMALL_DATASET_IMAGES:,} training images) from scratch.",
    epochs=100,
    imgsz=640,
    batch=-1,
    patience=100,
    optimizer="auto",
)
RECIPES = (SMALL_FROM_SCRATCH, FINE_TUNE, FAST_CHECK, ULTRALYTICS_DEFAULTS)


def recipe_get(slug: str) -> Recipe | None:
    return next((r for r in RECIPES if r.slug == slug), None)


def recipe_default(*, train_images: int, weights: str) -> Recipe:
    """What to start from: fine-tuning when the weights are pretrained or an earlier model;
    from scratch, the demo's recipe on a small dataset, Ultralytics' defaults on a large one."""
    if weights in (WeightsSource.PRETRAINED, WeightsSource.MODEL):
        return FINE_TUNE
    if train_images <= SMALL_DATASET_IMAGES:
        return SMALL_FROM_SCRATCH
    return ULTRALYTICS_DEFAULTS


SAVED_PREFIX = "saved-"


def saved_recipe(row: WorkspaceRecipe) -> Recipe:
    """A workspace's recipe as the form offers it, beside the built-in ones."""
    return Recipe(
        slug=f"{SAVED_PREFIX}{row.pk}",
        name=row.name,
        when=row.description or "A recipe of this workspace.",
        epochs=row.epochs,
        imgsz=row.imgsz,
        batch=row.batch,
        patience=row.patience,
        optimizer=row.optimizer,
        extra_args=dict(row.extra_args or {}),
    )


def workspace_recipes(*, workspace: Workspace) -> list[Recipe]:
    """The workspace's own recipes, by name (only its own: the scoped lookup)."""
    return [saved_recipe(row) for row in WorkspaceRecipe.objects.for_workspace(workspace)]


def workspace_recipe_rows(*, workspace: Workspace) -> QuerySet[WorkspaceRecipe]:
    """The workspace's recipes as rows, by name, with who saved each (the recipes page)."""
    return WorkspaceRecipe.objects.for_workspace(workspace).select_related("created_by")


def workspace_recipe_get(*, workspace: Workspace, pk: int, lock: bool = False) -> WorkspaceRecipe:
    """One recipe of the workspace; another workspace's id is as unknown as a missing one."""
    rows = WorkspaceRecipe.objects.for_workspace(workspace)
    if lock:
        rows = rows.select_for_update()
    recipe = rows.filter(pk=pk).first()
    if recipe is None:
        raise Http404("No such recipe in this workspace.")
    return recipe
