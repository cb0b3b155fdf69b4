"""The folder `val` reads: the chosen split only, labels in the model's classes as paired, labels
of classes paired with none left out (no model is loaded here)."""

import pytest
import yaml

from datasets.models import LabelKind
from datasets.services.versions import version_create
from evaluations.services.data import evaluation_data_write
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, LabelFactory

pytestmark = pytest.mark.django_db


def test_labels_are_renumbered_as_paired_and_unpaired_ones_left_out(team, tmp_path):
    dataset = DatasetFactory(workspace=team.workspace, name="Street")
    classes = [
        DatasetClassFactory(dataset=dataset, index=i, name=n)
        for i, n in enumerate(["Person", "truck", "bus"])
    ]
    for split in ("train", "val", "val", "test"):
        image = ImageFactory(dataset=dataset, split=split)
        for i, cls in enumerate(classes):  # each class's box at a place of its own
            LabelFactory(image=image, dataset_class=cls, data=[0.2 + 0.3 * i, 0.5, 0.1, 0.1])
    version = version_create(access=team.access("editor"), dataset=dataset)
    # The model knows "car" (index 0) and "person" (1); car stands for truck, bus for nothing.
    pairs = [{"model": "car", "version": "truck"}, {"model": "person", "version": "Person"}]
    data = evaluation_data_write(version=version, class_map=pairs, split="val", root=tmp_path / "d")
    doc = yaml.safe_load((tmp_path / "d" / "data.yaml").read_text())
    assert doc["names"] == {0: "car", 1: "person"}
    assert doc["train"] == doc["val"] == "images/val"
    assert data.data == str(tmp_path / "d" / "data.yaml")
    images = sorted((tmp_path / "d" / "images" / "val").iterdir())
    assert len(images) == 2 == len(data.images)  # the two val images, no train or test one
    assert not (tmp_path / "d" / "images" / "train").exists()
    assert set(data.images) == {p.name for p in images}
    for image in images:
        lines = (tmp_path / "d" / "labels" / "val" / f"{image.stem}.txt").read_text().splitlines()
        # Person's box (at 0.2) is the model's class 1, truck's (at 0.5) class 0; bus's is gone.
        assert sorted(line.split()[:2] for line in lines) == [["0", "0.5"], ["1", "0.2"]]


def test_a_classification_version_is_laid_out_in_the_model_class_folders(team, tmp_path):
    access = team.access("editor")
    dataset = DatasetFactory(workspace=team.workspace, name="Pets", task="classify")
    cat, dog, fox = (
        DatasetClassFactory(dataset=dataset, index=i, name=n)
        for i, n in enumerate(["Cat", "dog", "fox"])
    )
    for cls in (cat, dog, fox, cat):
        LabelFactory(
            image=ImageFactory(dataset=dataset, split="val"),
            dataset_class=cls,
            kind=LabelKind.TAG,
            data=[],
        )
    version = version_create(access=access, dataset=dataset)
    pairs = [
        {"model": "cat", "version": "Cat"},
        {"model": "dog", "version": "dog"},
        {"model": "bird", "version": None},
    ]
    data = evaluation_data_write(version=version, class_map=pairs, split="val", root=tmp_path / "c")
    root = tmp_path / "c" / "images"
    assert data.data == str(root)
    assert sorted(p.name for p in (root / "val").iterdir()) == ["cat", "dog"]  # no fox
    assert len(list((root / "val" / "cat").iterdir())) == 2
    assert (root / "train").resolve() == (root / "val").resolve()
