"""The dataset health check: problems that would spoil training, found before training starts.

`health_run` reads every image's bytes again (unreadable and truncated files, perceptual hashes
for near-duplicates and train/val leakage) and every label (shapes outside the image, tiny boxes,
shapes that do not fit the task, class balance), runs the checks on what it read
(datasets.services.health_checks), then replaces the dataset's findings at once.
"""

import hashlib
import io
import logging
import os
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import Case, When
from django.utils import timezone
from PIL import Image as PILImage

from core.leases import Lease
from datasets.models import (
    PIXEL_TASKS,
    Blob,
    Dataset,
    DatasetClass,
    HealthFinding,
    Image,
    Label,
    PixelMap,
    Severity,
)
from datasets.services.health_checks import (
    KIND_ORDER,
    SEVERITY_ORDER,
    DataTally,
    DecodeResult,
    Kind,
    data_findings,
    dhash,
    hash_to_db,
    label_findings,
    map_findings,
    pixel_findings,
    plural,
    stored_damaged_finding,
)
from datasets.services.health_duplicates import duplicate_findings
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

DECODE_THREADS = min(8, os.cpu_count() or 1)


def blob_decode(
    *, blob_id: int, storage_key: str, size: int | None = None, sha256: str | None = None
) -> DecodeResult:
    """Read the stored bytes and decode every pixel; hash the picture when it decodes.

    Bytes that are not the `size` and `sha256` the blob's row records (a file cut short by a
    full disk) are damaged, and not decoded. JPEGs decode at reduced scale (the whole stream is
    still read, so truncation is caught) and straight to grey, which is what the hash needs and
    several times faster than full size.
    """
    try:
        with default_storage.open(storage_key, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return DecodeResult(blob_id, None, "the stored file is missing", damaged=True)
    except (OSError, ValueError) as e:
        return DecodeResult(blob_id, None, f"the stored file cannot be read ({e})")
    except Exception as e:  # object stores raise their own kinds
        return DecodeResult(blob_id, None, f"the stored file cannot be read ({type(e).__name__})")
    if size is not None and len(data) != size:
        why = f"{len(data):,} bytes stored, {size:,} recorded"
        return DecodeResult(blob_id, None, why, damaged=True)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        why = "the stored bytes are not the ones recorded"
        return DecodeResult(blob_id, None, why, damaged=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            with PILImage.open(io.BytesIO(data)) as img:
                if img.format in ("JPEG", "MPO"):
                    img.draft("L", (64, 64))
                img.load()
                return DecodeResult(blob_id, dhash(img))
    except Exception as e:  # Pillow raises many kinds for broken files
        reason = str(e) or type(e).__name__
        return DecodeResult(blob_id, None, reason[:120])


# --- the run ----------------------------------------------------------------------------------


def health_run(*, dataset: Dataset, lease: Lease | None = None) -> list[HealthFinding]:
    """Check the dataset and replace its findings and counts. Returns the new findings.

    Not one transaction as a whole: reading thousands of images takes minutes, and a
    transaction held open that long would block writers. The replacement at the end is atomic.
    Under a health run's `lease` (health_runs), the findings are replaced only while the lease
    is still this worker's: LeaseLost otherwise, and a newer run's findings stay.
    """
    if lease is not None:
        lease.renew()  # one given up on stops before reading every image again
    started = time.monotonic()
    findings = _health_check(dataset)
    created = _findings_replace(dataset=dataset, findings=findings, lease=lease)
    logger.info(
        "health check of dataset %s: %d findings in %.1f s",
        dataset.pk,
        len(created),
        time.monotonic() - started,
    )
    return created


def _health_check(dataset: Dataset) -> list[dict]:
    images = list(
        Image.objects.filter(dataset=dataset).values_list(
            "id",
            "filename",
            "split",
            "label_count",
            "blob_id",
            "blob__sha256",
            "blob__phash",
            "blob__width",
            "blob__height",
            "blob__size",
        )
    )
    if not images:
        return []
    findings: list[dict] = []
    findings += pixel_findings(images, _blobs_decode(images))
    findings += duplicate_findings(images)  # byte-identical copies (health_duplicates)
    if dataset.task in PIXEL_TASKS:
        return findings + _map_check(dataset, images)
    labels = (
        Label.objects.filter(image__dataset=dataset)
        .values_list("image_id", "dataset_class_id", "kind", "data")
        .iterator(chunk_size=5000)
    )
    classes = list(
        DatasetClass.objects.filter(dataset=dataset).order_by("index").values_list("id", "name")
    )
    tally = DataTally(task=dataset.task, classes=classes)
    for row in images:
        tally.image(row[0], row[2])
    findings += label_findings(
        task=dataset.task,
        keypoint_shape=dataset.keypoint_shape,
        images=images,
        labels=labels,
        tally=tally,
    )
    # The same rules training applies to a version (datasets.services.version_checks).
    findings += [finding.as_health() for finding in data_findings(tally)]
    return findings


def _map_check(dataset: Dataset, images: list[tuple]) -> list[dict]:
    """A semantic or depth dataset: its maps' checks instead of the label checks (which look
    at label rows it has none of), then the split and class rules on the images that have a
    map, which are the ones training gets."""
    maps = {
        image_id: (width, height, stats)
        for image_id, width, height, stats in PixelMap.objects.filter(
            image__dataset=dataset
        ).values_list("image_id", "blob__width", "blob__height", "stats")
    }
    classes = list(
        DatasetClass.objects.filter(dataset=dataset)
        .order_by("index")
        .values_list("id", "name", "index")
    )
    tally = DataTally(task=dataset.task, classes=[(pk, name) for pk, name, _ in classes])
    for row in images:
        if row[0] in maps:
            tally.image(row[0], row[2])
    findings = map_findings(
        task=dataset.task, images=images, maps=maps, classes=classes, tally=tally
    )
    # "Classes without labels" is map_findings' "classes in no mask" here.
    rules = [f for f in data_findings(tally) if f.code != Kind.CLASS_EMPTY]
    return findings + [finding.as_health() for finding in rules]


def _blobs_decode(images: list[tuple]) -> dict[int, DecodeResult]:
    """Decode each image's blob once (in threads) and store the hashes that changed."""
    blobs = {row[4]: (row[5], row[9]) for row in images}

    def decode(item: tuple[int, tuple[str, int]]) -> DecodeResult:
        blob_id, (sha256, size) = item
        key = Blob(sha256=sha256).storage_key
        return blob_decode(blob_id=blob_id, storage_key=key, size=size, sha256=sha256)

    with ThreadPoolExecutor(max_workers=DECODE_THREADS) as pool:
        results = list(pool.map(decode, blobs.items()))
    decoded = {r.blob_id: r for r in results}

    stored = {row[4]: row[6] for row in images}
    new_hashes = [
        Blob(pk=r.blob_id, phash=hash_to_db(r.phash))
        for r in results
        if r.phash is not None and stored.get(r.blob_id) != hash_to_db(r.phash)
    ]
    if new_hashes:
        Blob.objects.bulk_update(new_hashes, ["phash"], batch_size=1000)

    return decoded


@transaction.atomic
def _findings_replace(
    *, dataset: Dataset, findings: list[dict], lease: Lease | None = None
) -> list[HealthFinding]:
    if lease is not None:
        lease.fence()
    locked = Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
    if locked is None:  # deleted while we were reading
        return []
    HealthFinding.objects.filter(dataset=locked).delete()
    created = HealthFinding.objects.bulk_create(
        HealthFinding(dataset=locked, **finding) for finding in findings
    )
    counts = Counter(f["severity"] for f in findings)
    now = timezone.now()
    Dataset.objects.filter(pk=locked.pk).update(
        health_errors=counts[Severity.ERROR],
        health_warnings=counts[Severity.WARNING],
        health_checked_at=now,
    )
    dataset.health_errors = counts[Severity.ERROR]
    dataset.health_warnings = counts[Severity.WARNING]
    dataset.health_checked_at = now
    return created


@transaction.atomic
def health_stored_damage_mark(*, dataset: Dataset, damaged: list[tuple[int, str, str]]) -> None:
    """Set the dataset's finding on images whose stored file is damaged or missing, as
    `manage.py blobs_check --repair` found them ((image id, filename, what is wrong) each), or
    clear it with none, without waiting for the next check (which finds the same); its counts
    follow."""
    locked = Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
    if locked is None:
        return
    HealthFinding.objects.filter(dataset=locked, kind=Kind.STORED_DAMAGED).delete()
    if damaged:
        HealthFinding.objects.create(dataset=locked, **stored_damaged_finding(damaged))
    counts = Counter(
        HealthFinding.objects.filter(dataset=locked).values_list("severity", flat=True)
    )
    Dataset.objects.filter(pk=locked.pk).update(
        health_errors=counts[Severity.ERROR], health_warnings=counts[Severity.WARNING]
    )


# --- reads, and what training makes of the result (runs: datasets.services.health_runs) ------


def health_finding_list(*, dataset: Dataset):
    """The dataset's findings, errors first (the order the report shows them in)."""
    order = Case(
        When(severity=Severity.ERROR, then=0),
        When(severity=Severity.WARNING, then=1),
        default=2,
    )
    return HealthFinding.objects.filter(dataset=dataset).order_by(order, "kind", "id")


def health_findings_with_previews(
    *, dataset: Dataset, per_finding: int = 6
) -> tuple[list[HealthFinding], list[int]]:
    """The findings, most serious first, each with `.previews`: up to `per_finding` of its
    images that still exist, as (id, filename); and the ids of those images' blobs that have
    no thumbnail yet. Two queries however many findings."""
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    findings = sorted(
        health_finding_list(dataset=dataset),
        key=lambda f: (SEVERITY_ORDER.get(f.severity, 9), rank.get(f.kind, 99), f.pk),
    )
    wanted = {i for f in findings for i in f.image_ids[:per_finding] if isinstance(i, int)}
    rows = (
        Image.objects.filter(dataset=dataset, pk__in=wanted).values_list(
            "pk", "filename", "blob_id", "blob__has_thumbnail"
        )
        if wanted
        else []
    )
    names, no_thumbnail = {}, []
    for pk, filename, blob_id, has_thumbnail in rows:
        names[pk] = filename
        if not has_thumbnail:
            no_thumbnail.append(blob_id)
    for finding in findings:
        finding.previews = [(i, names[i]) for i in finding.image_ids[:per_finding] if i in names]
    return findings, no_thumbnail


def dataset_training_blocked_reason(*, dataset: Dataset) -> str | None:
    """Why training on this dataset is refused under the workspace's policy, or None."""
    if not dataset.workspace.block_training_on_dataset_errors:
        return None
    if dataset.health_checked_at is None:
        return (
            f"The health check has not run on “{dataset.name}” yet, and this workspace blocks "
            f"training on datasets with errors. Run it from the dataset's Health page."
        )
    if dataset.health_errors:
        return (
            f"The health check found {plural(dataset.health_errors, 'error')} in "
            f"“{dataset.name}” (checked {_when(dataset.health_checked_at)}), and this workspace "
            f"blocks training on datasets with errors. Fix them and run the check again."
        )
    return None


def _when(at: datetime) -> str:
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M %Z")


@transaction.atomic
def workspace_health_policy_set(*, access: WorkspaceAccess, block_training: bool) -> None:
    access.require(Perm.MANAGE_WORKSPACE)
    workspace = access.workspace
    workspace.block_training_on_dataset_errors = block_training
    workspace.save(update_fields=["block_training_on_dataset_errors"])
