"""A dataset version as the folder `val` reads for one evaluation: the chosen split's images as
"val", written by the same code that lays a version out for training
(datasets.services.export.yolo_layout_write), with each label's class renumbered to the model
class it is paired with, and labels of classes paired with none left out. A semantic mask is
written as it is stored: data.yaml's `label_mapping` (Ultralytics' own) tells val the model
class of each of its values, and 255 (ignored) for a class paired with none. A depth map has no
classes: it is written as it is."""

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from datasets.models import IGNORE_INDEX, DatasetVersion, Task
from datasets.services.export import yolo_layout_write
from datasets.services.versions import version_manifest_load
from training.services.materialise import _FolderSink


def manifest_for_evaluation(manifest: dict, *, class_map: list[dict], split: str) -> dict:
    """The images of `split`, as split "val", with labels in the model's classes: a label of a
    version class paired with model class i has class i; one of a class paired with none is
    left out (the model was never asked to find it). Depth (`class_map` empty) keeps its
    classes: it has none to pair."""
    if manifest["task"] == Task.DEPTH:
        images = [
            {**image, "split": "val"} for image in manifest["images"] if image["split"] == split
        ]
        return {**manifest, "images": images}
    version_index = {name: i for i, name in enumerate(manifest["classes"])}
    to_model = {
        version_index[pair["version"]]: i
        for i, pair in enumerate(class_map)
        if pair.get("version") in version_index
    }
    images = []
    for image in manifest["images"]:
        if image["split"] != split:
            continue
        labels = [
            {**label, "class": to_model[label["class"]]}
            for label in image["labels"]
            if label["class"] in to_model
        ]
        images.append({**image, "split": "val", "labels": labels})
    return {**manifest, "classes": [pair["model"] for pair in class_map], "images": images}


class _RecordingSink(_FolderSink):
    """Writes the folder and notes which stored image each image file is."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.images: dict[str, str] = {}  # file name → sha256

    def blob(self, arcname: str, sha256: str) -> None:
        super().blob(arcname, sha256)
        if arcname.startswith("images/"):
            # Names are unique within a split (export._image_names), class folders or not.
            self.images[arcname.rsplit("/", 1)[-1]] = sha256


@dataclass(frozen=True)
class EvaluationData:
    data: str  # the `data=` argument of val
    images: dict[str, str]  # image file name → sha256


def semantic_label_mapping(version_classes: list[str], class_map: list[dict]) -> dict[int, int]:
    """Each mask value (a class of the version) → the model class paired with it, or 255 (the
    ignore value) for a class paired with none; {} when every value already is its model class
    (the model's classes are the version's, in its order)."""
    to_model = {pair["version"]: i for i, pair in enumerate(class_map) if pair.get("version")}
    mapping = {v: to_model.get(name, IGNORE_INDEX) for v, name in enumerate(version_classes)}
    return {} if all(v == m for v, m in mapping.items()) else mapping


def evaluation_data_write(
    *, version: DatasetVersion, class_map: list[dict], split: str, root: Path
) -> EvaluationData:
    """Write the folder under `root` (which must not exist yet)."""
    stored = version_manifest_load(version)
    manifest = manifest_for_evaluation(stored, class_map=class_map, split=split)
    sink = _RecordingSink(root=Path(root))
    yolo_layout_write(sink, manifest)
    Path(root).mkdir(parents=True, exist_ok=True)
    if manifest["task"] == Task.CLASSIFY:
        # Ultralytics reads the classes from train/ and would split the folder itself without
        # one: train/ is val/ again (val reads only val/).
        (Path(root) / "images" / "val").mkdir(parents=True, exist_ok=True)
        os.symlink("val", Path(root) / "images" / "train")
        return EvaluationData(data=str(Path(root) / "images"), images=sink.images)
    data_yaml = Path(root) / "data.yaml"
    doc = yaml.safe_load(data_yaml.read_text(encoding="utf-8"))
    doc["train"] = doc["val"] = "images/val"  # Ultralytics asks for a train entry; val reads val
    if manifest["task"] == Task.SEMANTIC:
        mapping = semantic_label_mapping(stored["classes"], class_map)
        if mapping:
            doc["label_mapping"] = mapping
    data_yaml.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "utf-8")
    return EvaluationData(data=str(data_yaml), images=sink.images)
