"""A dataset version as the folder Ultralytics trains from, cached by the version's content
hash: a second job on the same version (on the same machine) starts without copying a byte."""

import shutil
import uuid
from pathlib import Path

from core.storage import storage_get_file
from datasets.models import Blob, DatasetVersion, Task
from datasets.services.export import yolo_layout_write
from datasets.services.versions import version_manifest_load


class _FolderSink:
    def __init__(self, root: Path):
        self.root = root

    def _path(self, arcname: str) -> Path:
        path = self.root / arcname
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def blob(self, arcname: str, sha256: str) -> None:
        storage_get_file(Blob(sha256=sha256).storage_key, self._path(arcname), link=True)

    def text(self, arcname: str, text: str) -> None:
        self._path(arcname).write_text(text, encoding="utf-8")


def manifest_subset(manifest: dict, *, train: int, val: int) -> dict:
    """The first images of train and val (the manifest is sorted by hash: always the same)."""
    left = {"train": train, "val": val}
    images = []
    for image in manifest["images"]:
        if left.get(image["split"], 0) > 0:
            left[image["split"]] -= 1
            images.append(image)
    return {**manifest, "images": images}


def dataset_materialise(
    version: DatasetVersion, *, workdir: Path, subset: tuple[int, int] | None = None
) -> str:
    """The `data=` argument for training on `version`: a data.yaml path, or for
    classification the folder that holds train/ and val/."""
    name = version.content_hash + (f"-subset{subset[0]}x{subset[1]}" if subset else "")
    root = Path(workdir) / "datasets" / name
    if not root.exists():
        manifest = version_manifest_load(version)
        if subset:
            manifest = manifest_subset(manifest, train=subset[0], val=subset[1])
        tmp = root.with_name(f".{name}.{uuid.uuid4().hex}")
        try:
            yolo_layout_write(_FolderSink(tmp), manifest)
            tmp.mkdir(parents=True, exist_ok=True)
            try:
                tmp.rename(root)  # atomic: a reader sees the whole folder or none
            except OSError:
                if not root.exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # lost a race, or failed half-way
    if version.dataset.task == Task.CLASSIFY:
        return str(root / "images")
    return str(root / "data.yaml")
