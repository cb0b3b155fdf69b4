"""Dataset versions: immutable manifests frozen in storage, numbered per dataset.

A manifest is canonical JSON (sorted keys, no spaces) of the dataset's name, task, class names,
keypoint shape and every image (sorted by sha256, then row id) with its labels. Its sha256 is the
version's content hash and its storage key, so identical content is stored once.
"""

import gzip
import hashlib
import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Q

from core.errors import ServiceError
from core.storage import storage_put
from datasets.models import (
    PIXEL_TASKS,
    Dataset,
    DatasetClass,
    DatasetVersion,
    Image,
    Label,
    PixelMap,
    Task,
)
from workspaces.models import User
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

MANIFEST_PREFIX = "manifests/"
MANIFEST_BATCH = 5000


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_canonical = _ENCODER.encode
_WRITE_BUFFER = 1 << 20


def _label_sort_key(label: dict) -> tuple:
    return (label["class"], label["kind"], label["data"])


@dataclass
class ManifestHead:
    dataset: str
    task: str
    classes: list[str]
    keypoint_shape: list | None
    # Depth datasets only: the PNG value of one metre (absent from other manifests, so their
    # hashes are what they were).
    depth_scale: float | None = None


@dataclass
class _Summary:
    splits: Counter = field(default_factory=Counter)
    labels_per_class: Counter = field(default_factory=Counter)
    images: int = 0
    labels: int = 0
    masks: int = 0
    mask_splits: Counter = field(default_factory=Counter)

    def add(self, image: dict, classes: list[str]) -> None:
        self.images += 1
        self.splits[image["split"]] += 1
        for label in image["labels"]:
            self.labels += 1
            self.labels_per_class[classes[label["class"]]] += 1
        if "mask" in image:  # a semantic mask or depth map: the image's one label
            self.labels += 1
            self.masks += 1
            self.mask_splits[image["split"]] += 1

    def as_dict(self, classes: list[str]) -> dict:
        return {
            "images": self.images,
            "labels": self.labels,
            "classes": len(classes),
            **({"masks": self.masks} if self.masks else {}),
            **({"masks_per_split": dict(sorted(self.mask_splits.items()))} if self.masks else {}),
            "splits": dict(sorted(self.splits.items())),
            "labels_per_class": {name: self.labels_per_class.get(name, 0) for name in classes},
        }


def manifest_head(*, dataset: Dataset) -> tuple[ManifestHead, dict[int, int]]:
    """The manifest's fields other than images, and the class row id → class index map."""
    rows = list(
        DatasetClass.objects.filter(dataset=dataset).order_by("index").values_list("id", "name")
    )
    head = ManifestHead(
        dataset=dataset.name,
        task=dataset.task,
        classes=[name for _, name in rows],
        keypoint_shape=dataset.keypoint_shape,
        depth_scale=(dataset.depth_scale or 1000.0) if dataset.task == Task.DEPTH else None,
    )
    # Class indexes may have gaps after deletions; the manifest renumbers them 0..n-1.
    return head, {class_id: i for i, (class_id, _) in enumerate(rows)}


def manifest_images(*, dataset: Dataset, class_index: dict[int, int]) -> Iterator[dict]:
    """Every image of the dataset with its labels, sorted by sha256 (then row id: copies of
    one file are images of their own, each with its labels and split), read in batches.

    Two queries per batch of images (keyset on (sha256, id), then their labels), so memory and
    the number of queries stay small however large the dataset is: 10,000 images take 5 queries.
    """
    after: tuple[str, int] = ("", 0)
    per_pixel = dataset.task in PIXEL_TASKS
    while True:
        sha, last_id = after
        batch = list(
            Image.objects.filter(dataset=dataset)
            .filter(Q(blob__sha256__gt=sha) | Q(blob__sha256=sha, id__gt=last_id))
            .order_by("blob__sha256", "id")
            .values_list("id", "blob__sha256", "filename", "split", "blob__width", "blob__height")[
                :MANIFEST_BATCH
            ]
        )
        if not batch:
            return
        labels: dict[int, list[dict]] = {}
        rows = (
            Label.objects.filter(image_id__in=[row[0] for row in batch])
            .order_by("id")
            .values_list("image_id", "dataset_class_id", "kind", "data")
        )
        for image_id, class_id, kind, data in rows:
            if class_id in class_index:
                labels.setdefault(image_id, []).append(
                    {"class": class_index[class_id], "kind": kind, "data": data}
                )
        maps = (
            dict(
                PixelMap.objects.filter(image_id__in=[row[0] for row in batch]).values_list(
                    "image_id", "blob__sha256"
                )
            )
            if per_pixel
            else {}
        )
        for image_id, sha, filename, split, width, height in batch:
            own = labels.get(image_id, [])
            if len(own) > 1:
                own.sort(key=_label_sort_key)
            entry = {
                "sha256": sha,
                "filename": filename,
                "split": split,
                "width": width,
                "height": height,
                "labels": own,
            }
            if image_id in maps:
                # Semantic / depth: the image's mask or depth map, a PNG blob.
                entry["mask"] = maps[image_id]
            yield entry
        if len(batch) < MANIFEST_BATCH:
            return
        after = (batch[-1][1], batch[-1][0])


def manifest_build(*, dataset: Dataset) -> dict:
    """The dataset's current manifest as a dict (what a version would freeze now)."""
    head, class_index = manifest_head(dataset=dataset)
    return {
        "dataset": head.dataset,
        "task": head.task,
        "classes": head.classes,
        "keypoint_shape": head.keypoint_shape,
        "images": list(manifest_images(dataset=dataset, class_index=class_index)),
        **({"depth_scale": head.depth_scale} if head.depth_scale is not None else {}),
    }


@dataclass(frozen=True)
class FrozenManifest:
    content_hash: str
    key: str
    summary: dict


def _manifest_freeze(*, dataset: Dataset) -> FrozenManifest:
    """Stream the canonical manifest into a hash and a gzip file; store it once by its hash.

    The text written is exactly `_canonical(manifest_build(...))`: the top-level keys are
    written in sorted order with the image list streamed in the middle.
    """
    head, class_index = manifest_head(dataset=dataset)
    summary = _Summary()
    hasher = hashlib.sha256()
    with tempfile.TemporaryFile() as raw:
        # mtime=0: the same manifest always gives the same bytes.
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            pending: list[str] = []
            size = 0

            def write(text: str, flush: bool = False) -> None:
                nonlocal size
                pending.append(text)
                size += len(text)
                if flush or size >= _WRITE_BUFFER:
                    data = "".join(pending).encode()
                    hasher.update(data)
                    gz.write(data)
                    pending.clear()
                    size = 0

            write(f'{{"classes":{_canonical(head.classes)},"dataset":{_canonical(head.dataset)}')
            if head.depth_scale is not None:
                write(f',"depth_scale":{_canonical(head.depth_scale)}')
            write(',"images":[')
            for i, image in enumerate(manifest_images(dataset=dataset, class_index=class_index)):
                write(("," if i else "") + _canonical(image))
                summary.add(image, head.classes)
            write(f'],"keypoint_shape":{_canonical(head.keypoint_shape)}')
            write(f',"task":{_canonical(head.task)}}}', flush=True)
        content_hash = hasher.hexdigest()
        key = f"{MANIFEST_PREFIX}{content_hash}.json.gz"
        raw.seek(0)
        storage_put(key, raw)  # a concurrent writer may have stored the same bytes first
    return FrozenManifest(content_hash=content_hash, key=key, summary=summary.as_dict(head.classes))


def version_manifest_load(version: DatasetVersion) -> dict:
    with default_storage.open(version.manifest_key, "rb") as f, gzip.GzipFile(fileobj=f) as gz:
        return json.loads(gz.read())


def _version_freeze(*, dataset: Dataset, note: str, user: User | None) -> DatasetVersion:
    frozen = _manifest_freeze(dataset=dataset)
    # The row lock orders concurrent saves of one dataset: numbers never repeat, and the
    # second of two identical saves sees the first and is refused.
    Dataset.objects.select_for_update().filter(pk=dataset.pk).values_list("pk").first()
    latest = (
        DatasetVersion.objects.filter(dataset=dataset)
        .order_by("-number")
        .values_list("number", "content_hash")
        .first()
    )
    if latest is not None and latest[1] == frozen.content_hash:
        raise ServiceError(
            f"Nothing changed since version {latest[0]}: the images, labels and classes are the "
            "same, so no new version was saved."
        )
    return DatasetVersion.objects.create(
        dataset=dataset,
        number=(latest[0] if latest else 0) + 1,
        note=note.strip()[:200],
        content_hash=frozen.content_hash,
        manifest_key=frozen.key,
        summary=frozen.summary,
        created_by=user,
    )


@transaction.atomic
def version_create(*, access: WorkspaceAccess, dataset: Dataset, note: str = "") -> DatasetVersion:
    access.require(Perm.WRITE)
    if not access.owns(dataset):
        raise ServiceError("This dataset belongs to another workspace.")
    return _version_freeze(dataset=dataset, note=note, user=access.user)


def version_list(*, dataset: Dataset):
    return DatasetVersion.objects.filter(dataset=dataset).select_related("created_by")


def version_previous(*, version: DatasetVersion) -> DatasetVersion | None:
    return (
        DatasetVersion.objects.filter(dataset_id=version.dataset_id, number__lt=version.number)
        .order_by("-number")
        .first()
    )


# --- what changed between two manifests ---------------------------------------------------------


@dataclass
class ManifestDiff:
    added: list[dict]  # images (sha256, filename, split)
    removed: list[dict]
    split_changed: list[dict]  # sha256, filename, before, after
    labels_per_class: list[dict]  # class, added, removed
    classes_added: list[str]
    classes_removed: list[str]

    @property
    def is_empty(self) -> bool:
        return not (
            self.added
            or self.removed
            or self.split_changed
            or self.labels_per_class
            or self.classes_added
            or self.classes_removed
        )


def _label_keys(image: dict, classes: list[str]) -> Counter:
    return Counter(
        (classes[lb["class"]], lb["kind"], _canonical(lb["data"])) for lb in image["labels"]
    )


def _by_identity(images: list[dict]) -> dict[tuple[str, int], dict]:
    """Images keyed by what identifies one across versions: its bytes, and which copy it is
    (in the manifest's order) when the same file is in the dataset more than once."""
    seen: Counter = Counter()
    out = {}
    for img in images:
        out[(img["sha256"], seen[img["sha256"]])] = img
        seen[img["sha256"]] += 1
    return out


def _brief(img: dict) -> dict:
    return {"sha256": img["sha256"], "filename": img["filename"], "split": img["split"]}


def manifest_diff(*, before: dict | None, after: dict) -> ManifestDiff:
    """What changed from `before` to `after`; classes are compared by name."""
    before = before or {"classes": [], "images": []}
    old = _by_identity(before["images"])
    new = _by_identity(after["images"])
    added = [_brief(new[k]) for k in sorted(new.keys() - old.keys())]
    removed = [_brief(old[k]) for k in sorted(old.keys() - new.keys())]
    split_changed = [
        {
            "sha256": k[0],
            "filename": new[k]["filename"],
            "before": old[k]["split"],
            "after": new[k]["split"],
        }
        for k in sorted(new.keys() & old.keys())
        if old[k]["split"] != new[k]["split"]
    ]
    plus: Counter = Counter()
    minus: Counter = Counter()
    for key in old.keys() | new.keys():
        a = _label_keys(old[key], before["classes"]) if key in old else Counter()
        b = _label_keys(new[key], after["classes"]) if key in new else Counter()
        for (name, _, _), n in (b - a).items():
            plus[name] += n
        for (name, _, _), n in (a - b).items():
            minus[name] += n
    order = list(after["classes"]) + [c for c in before["classes"] if c not in after["classes"]]
    labels_per_class = [
        {"class": name, "added": plus.get(name, 0), "removed": minus.get(name, 0)}
        for name in order
        if plus.get(name) or minus.get(name)
    ]
    return ManifestDiff(
        added=added,
        removed=removed,
        split_changed=split_changed,
        labels_per_class=labels_per_class,
        classes_added=[c for c in after["classes"] if c not in before["classes"]],
        classes_removed=[c for c in before["classes"] if c not in after["classes"]],
    )
