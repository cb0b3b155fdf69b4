"""Evaluation fixtures: small versions made from factories (submitting reads no pixels), and a
real detect model trained here once per session (tests/deploy/conftest.py's recipe)."""

from pathlib import Path

import pytest

from datasets.services.versions import version_create
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)


def version_with(
    *,
    access,
    classes: list[str],
    task: str = "detect",
    name: str = "Street",
    splits=("train", "val", "val"),
):
    """A version of a `task` dataset with `classes`, each labelled once on every image."""
    dataset = DatasetFactory(workspace=access.workspace, name=name, task=task)
    rows = [DatasetClassFactory(dataset=dataset, index=i, name=n) for i, n in enumerate(classes)]
    for split in splits:
        image = ImageFactory(dataset=dataset, split=split)
        for row in rows:
            LabelFactory(image=image, dataset_class=row)
    return version_create(access=access, dataset=dataset, note="to evaluate")


def boxy_copy(weights: Path, target: Path) -> Path:
    """`weights` sure of class 0 everywhere (tests/deploy/conftest.py's confident_copy), with
    boxes a cell or two wide around each anchor: a one-epoch model's boxes cover the whole
    image and more, which predict clips to the image and val does not, so nothing it finds
    would ever match a label at IoU 0.5."""
    import torch
    from ultralytics import YOLO

    from tests.deploy.conftest import confident_copy

    yolo = YOLO(str(confident_copy(weights, target)))
    head = yolo.model.model[-1]
    with torch.no_grad():
        for branch in head.cv2:  # per scale: the box distances' last convolution
            last = branch[-1]
            last.weight.mul_(0.05)  # the model's own, a little: boxes differ from place to place
            last.bias.zero_()
            for side in range(4):  # each side's distance peaks at one cell
                last.bias[side * head.reg_max + 1] = 6.0
    yolo.save(target)
    return target


@pytest.fixture(scope="session")
def evaluation_weights(tmp_path_factory) -> dict[str, Path]:
    """Two real YOLO11n detect checkpoints of coco8's 80 classes: `trained` one epoch at
    imgsz 64 (it finds nothing), and `boxy` the same, sure of persons everywhere, in boxes of
    a sensible size (boxy_copy)."""
    from tests.deploy.conftest import tiny_model

    work = tmp_path_factory.mktemp("evaluation-models")
    trained = tiny_model("detect")
    return {"trained": trained, "boxy": boxy_copy(trained, work / "boxy.pt")}
