"""The dataset health check: each problem found on crafted data, none on clean real photos."""

import hashlib
import io
import os
import random
import time
from pathlib import Path

import pytest
import yaml
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from PIL import Image as PILImage
from PIL import ImageEnhance

from datasets.models import Blob, Dataset, HealthFinding, HealthRun, Image, Label
from datasets.services.health import dataset_training_blocked_reason, health_run
from datasets.services.health_checks import MAX_IMAGE_IDS, Kind, dhash, near_duplicate_pairs
from datasets.tasks import health_run_task
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    blob_for,
    png_bytes,
)

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets"
COCO8 = SHARED / "coco8"
PHOTO = COCO8 / "images" / "train" / "000000000009.jpg"  # 640×480
OTHER_PHOTO = COCO8 / "images" / "train" / "000000000025.jpg"

pytestmark = pytest.mark.django_db


# --- helpers ----------------------------------------------------------------------------------


def add_image(dataset, data: bytes, *, split="train", filename=None) -> Image:
    content_type = "image/jpeg" if data[:2] == b"\xff\xd8" else "image/png"
    return ImageFactory(
        dataset=dataset,
        blob=blob_for(data, content_type),
        split=split,
        **({"filename": filename} if filename else {}),
    )


def add_label(image: Image, cls, data, kind="box") -> Label:
    label = Label.objects.create(image=image, dataset_class=cls, kind=kind, data=data)
    Image.objects.filter(pk=image.pk).update(label_count=image.labels.count())
    return label


def reencode(data: bytes, *, brightness=1.0, quality=85) -> bytes:
    with PILImage.open(io.BytesIO(data)) as img:
        img = ImageEnhance.Brightness(img.convert("RGB")).enhance(brightness)
        out = io.BytesIO()
        img.save(out, format="JPEG", quality=quality)
        return out.getvalue()


def by_kind(findings) -> dict[str, HealthFinding]:
    kinds = [f.kind for f in findings]
    assert len(kinds) == len(set(kinds)), kinds
    return {f.kind: f for f in findings}


def healthy_dataset(workspace=None, **kw) -> tuple[Dataset, object]:
    """Two distinct photos, one per split, each with one sensible box."""
    dataset = DatasetFactory(**({"workspace": workspace} if workspace else {}), **kw)
    cls = DatasetClassFactory(dataset=dataset, index=0, name="thing")
    for path, split in ((PHOTO, "train"), (OTHER_PHOTO, "val")):
        add_label(add_image(dataset, path.read_bytes(), split=split), cls, [0.5, 0.5, 0.3, 0.3])
    return dataset, cls


YOLO_KIND = {"detect": "box", "segment": "polygon", "pose": "keypoints", "obb": "obb"}


def yolo_dataset(folder: Path, task: str) -> Dataset:
    """A dataset with a YOLO folder's real images and labels, classes as used."""
    meta = yaml.safe_load((folder / f"{folder.name}.yaml").read_text())
    dataset = DatasetFactory(task=task, keypoint_shape=meta.get("kpt_shape"))
    classes = {}
    for split in ("train", "val"):
        for path in sorted((folder / "images" / split).iterdir()):
            image = add_image(dataset, path.read_bytes(), split=split, filename=path.name)
            label_file = folder / "labels" / split / (path.stem + ".txt")
            rows = [line.split() for line in label_file.read_text().splitlines() if line.strip()]
            for row in rows:
                index = int(row[0])
                if index not in classes:
                    classes[index] = DatasetClassFactory(
                        dataset=dataset, index=index, name=meta["names"][index]
                    )
                Label.objects.create(
                    image=image,
                    dataset_class=classes[index],
                    kind=YOLO_KIND[task],
                    data=[float(v) for v in row[1:]],
                )
            Image.objects.filter(pk=image.pk).update(label_count=len(rows))
    return dataset


# --- the hash ---------------------------------------------------------------------------------


def test_hash_moves_little_for_a_copy_and_far_for_another_photo():
    def h(data):
        with PILImage.open(io.BytesIO(data)) as img:
            return dhash(img)

    photo = PHOTO.read_bytes()
    assert (h(photo) ^ h(reencode(photo, brightness=1.1))).bit_count() <= 4
    assert (h(photo) ^ h(reencode(photo, quality=60))).bit_count() <= 4
    assert (h(photo) ^ h(OTHER_PHOTO.read_bytes())).bit_count() > 16


def test_near_duplicate_pairs_match_brute_force():
    rng = random.Random(7)
    base = [rng.getrandbits(64) for _ in range(300)]
    hashes = {i: v for i, v in enumerate(base)}
    # plant copies at distance 0..6 from some of them
    for j, d in enumerate(range(7)):
        flipped = base[j]
        for bit in rng.sample(range(64), d):
            flipped ^= 1 << bit
        hashes[1000 + j] = flipped
    got = {tuple(sorted(p)) for p in near_duplicate_pairs(hashes, 4)}
    want = {
        (a, b) for a in hashes for b in hashes if a < b and (hashes[a] ^ hashes[b]).bit_count() <= 4
    }
    assert got == want
    assert {(j, 1000 + j) for j in range(5)} <= got  # distance 0..4 found, 5 and 6 not
    assert (5, 1005) not in got and (6, 1006) not in got


# --- each check on crafted data ---------------------------------------------------------------


def test_clean_real_photos_have_no_errors_only_the_classes_val_lacks():
    # coco8 as Ultralytics ships it: no error, and the one warning training gives it too
    # (datasets.services.version_checks): most of its train classes have no labels in val.
    dataset = yolo_dataset(COCO8, "detect")
    assert dataset.images.count() == 8
    findings = health_run(dataset=dataset)
    assert [(f.kind, f.severity) for f in findings] == [(Kind.CLASS_NOT_IN_VAL, "warning")]
    assert findings[0].message.startswith("6 classes have no labels in val: “zebra”, “giraffe”")
    dataset.refresh_from_db()
    assert (dataset.health_errors, dataset.health_warnings) == (0, 1)
    assert dataset.health_checked_at is not None
    # every blob got its perceptual hash stored, and the hashes are distinct photos
    hashes = list(Blob.objects.filter(images__dataset=dataset).values_list("phash", flat=True))
    assert None not in hashes and len(set(hashes)) == 8


@pytest.mark.parametrize(
    "folder,task", [("coco8-seg", "segment"), ("coco8-pose", "pose"), ("dota8", "obb")]
)
def test_real_datasets_of_other_tasks_have_no_errors(folder, task):
    dataset = yolo_dataset(SHARED / folder, task)
    findings = health_run(dataset=dataset)
    errors = [f.message for f in findings if f.severity == "error"]
    assert errors == []
    assert Kind.LABEL_KIND not in {f.kind for f in findings}


def test_truncated_and_missing_images_are_errors():
    dataset, cls = healthy_dataset()
    photo = reencode(PHOTO.read_bytes(), brightness=0.5)
    truncated = add_image(dataset, photo[: len(photo) * 2 // 3], filename="cut.jpg")
    missing = add_image(dataset, png_bytes(color=(1, 2, 3)), filename="gone.png")
    Path(os.environ["MEDIA_ROOT"], missing.blob.storage_key).unlink()

    found = by_kind(health_run(dataset=dataset))
    finding = found[Kind.UNREADABLE]
    assert finding.severity == "error"
    assert finding.image_ids == [truncated.pk]
    assert "1 image cannot be decoded" in finding.message
    assert "cut.jpg: image file is truncated" in finding.message
    # A stored file gone is storage's fault, not the image's (issue 34): a finding of its own.
    gone = found[Kind.STORED_DAMAGED]
    assert gone.severity == "error"
    assert gone.image_ids == [missing.pk]
    assert "1 image whose stored file is damaged or missing" in gone.message
    assert "gone.png: the stored file is missing" in gone.message
    dataset.refresh_from_db()
    assert dataset.health_errors == 2


def test_near_duplicates_in_one_split_are_a_warning():
    dataset, cls = healthy_dataset()
    photo = COCO8 / "images" / "train" / "000000000030.jpg"
    first = add_image(dataset, photo.read_bytes(), split="train")
    brighter = add_image(dataset, reencode(photo.read_bytes(), brightness=1.1), split="train")

    found = by_kind(health_run(dataset=dataset))
    assert Kind.LEAKAGE not in found
    near = found[Kind.NEAR_DUPLICATE]
    assert near.severity == "warning"
    assert near.image_ids == [first.pk, brighter.pk]
    assert "2 images in 1 group" in near.message


def test_the_same_picture_in_train_and_val_is_leakage():
    dataset, cls = healthy_dataset()
    photo = (COCO8 / "images" / "val" / "000000000036.jpg").read_bytes()
    in_train = add_image(dataset, photo, split="train")
    in_val = add_image(dataset, reencode(photo, quality=70), split="val")
    in_test = add_image(dataset, reencode(photo, brightness=1.08), split="test")

    found = by_kind(health_run(dataset=dataset))
    leak = found[Kind.LEAKAGE]
    assert leak.severity == "error"
    assert sorted(leak.image_ids) == sorted([in_train.pk, in_val.pk, in_test.pk])
    assert Kind.NEAR_DUPLICATE not in found


def test_byte_copies_are_reported_once_as_copies_not_again_as_near_duplicates():
    dataset, cls = healthy_dataset()
    photo = (COCO8 / "images" / "train" / "000000000034.jpg").read_bytes()
    copies = [add_image(dataset, photo, split=split) for split in ("train", "train", "val")]

    found = by_kind(health_run(dataset=dataset))
    assert sorted(found["exact_leakage"].image_ids) == sorted(i.pk for i in copies)
    assert Kind.LEAKAGE not in found and Kind.NEAR_DUPLICATE not in found

    # A re-encoded copy in val: two different files cross the splits, and that is said.
    Image.objects.filter(pk=copies[2].pk).delete()
    near = add_image(dataset, reencode(photo, quality=70), split="val")
    found = by_kind(health_run(dataset=dataset))
    assert sorted(found["exact_copy"].image_ids) == sorted(i.pk for i in copies[:2])
    assert sorted(found[Kind.LEAKAGE].image_ids) == sorted([copies[0].pk, copies[1].pk, near.pk])
    assert "train and val/test share 1 picture" in found[Kind.LEAKAGE].message
    assert Kind.NEAR_DUPLICATE not in found


def test_labels_outside_the_image_are_errors_with_a_tolerance_at_the_edge():
    dataset, cls = healthy_dataset()
    image = add_image(dataset, (COCO8 / "images/val/000000000042.jpg").read_bytes())
    add_label(image, cls, [0.95, 0.5, 0.2, 0.2])  # right edge at 1.05: outside
    add_label(image, cls, [0.5, 1.2, 0.1, 0.1])  # centre below the image
    edge = add_image(dataset, (COCO8 / "images/val/000000000049.jpg").read_bytes())
    add_label(edge, cls, [0.9, 0.5, 0.2048, 0.2])  # 0.24 % past the edge: rounding, fine
    add_label(edge, cls, [0.0, 0.0, 0.0, 0.0], kind="box")  # zero size: malformed
    add_label(edge, cls, [0.5, "x", 0.1, 0.1])  # not numbers: malformed

    found = by_kind(health_run(dataset=dataset))
    outside = found[Kind.LABEL_OUTSIDE]
    assert outside.severity == "error"
    assert outside.image_ids == [image.pk]
    assert "2 labels on 1 image" in outside.message
    malformed = found[Kind.LABEL_MALFORMED]
    assert malformed.image_ids == [edge.pk] and "2 labels" in malformed.message


def test_polygon_and_keypoints_outside_are_errors():
    dataset = DatasetFactory(task="pose", keypoint_shape=[2, 3])
    cls = DatasetClassFactory(dataset=dataset, index=0)
    photo = add_image(dataset, PHOTO.read_bytes())
    add_label(photo, cls, [0.5, 0.5, 0.4, 0.4, 0.4, 0.4, 2, 1.3, 0.5, 2], kind="keypoints")
    hidden = add_image(dataset, OTHER_PHOTO.read_bytes(), split="val")
    # a point placed outside but marked not labelled (v=0) is how YOLO writes missing points
    add_label(hidden, cls, [0.5, 0.5, 0.4, 0.4, 0.4, 0.4, 2, 1.3, 0.5, 0], kind="keypoints")

    found = by_kind(health_run(dataset=dataset))
    assert found[Kind.LABEL_OUTSIDE].image_ids == [photo.pk]


def test_tiny_boxes_are_a_warning():
    dataset, cls = healthy_dataset()
    image = add_image(dataset, (COCO8 / "images/val/000000000061.jpg").read_bytes())
    width = image.blob.width
    add_label(image, cls, [0.5, 0.5, 1.5 / width, 0.2])  # 1.5 px wide
    add_label(image, cls, [0.3, 0.3, 0.009, 0.009])  # area 0.000081 of the image
    add_label(image, cls, [0.7, 0.7, 0.05, 0.05])  # fine

    found = by_kind(health_run(dataset=dataset))
    tiny = found[Kind.TINY_BOX]
    assert tiny.severity == "warning"
    assert tiny.image_ids == [image.pk]
    assert "2 labels on 1 image" in tiny.message


def test_class_imbalance_and_empty_classes_are_warnings():
    dataset, common = healthy_dataset()
    rare = DatasetClassFactory(dataset=dataset, index=1, name="rare")
    DatasetClassFactory(dataset=dataset, index=2, name="never")
    images = list(dataset.images.all())
    for i in range(20):
        add_label(images[i % 2], common, [0.2 + i * 0.03, 0.5, 0.02, 0.05])
    add_label(images[1], rare, [0.5, 0.5, 0.1, 0.1])

    found = by_kind(health_run(dataset=dataset))
    imbalance = found[Kind.CLASS_IMBALANCE]
    assert imbalance.severity == "warning"
    assert "“thing” has 22 labels, 22× as many as “rare” (1)" in imbalance.message
    assert imbalance.image_ids == [images[1].pk]
    empty = found[Kind.CLASS_EMPTY]
    assert "“never”" in empty.message and empty.severity == "warning"


def test_balanced_classes_are_not_flagged():
    dataset, common = healthy_dataset()
    other = DatasetClassFactory(dataset=dataset, index=1, name="other")
    image = dataset.images.first()
    for i in range(4):
        add_label(image, other, [0.2 + i * 0.1, 0.5, 0.05, 0.05])
    kinds = {f.kind for f in health_run(dataset=dataset)}
    assert Kind.CLASS_IMBALANCE not in kinds and Kind.CLASS_EMPTY not in kinds


def test_labels_the_task_does_not_use_unlabelled_images_and_no_val():
    dataset = DatasetFactory(task="detect")
    cls = DatasetClassFactory(dataset=dataset, index=0)
    labelled = add_image(dataset, PHOTO.read_bytes())
    add_label(labelled, cls, [0.5, 0.5, 0.2, 0.2])
    add_label(labelled, cls, [0.1, 0.1, 0.3, 0.1, 0.2, 0.3], kind="polygon")
    bare = add_image(dataset, OTHER_PHOTO.read_bytes(), split="test")

    found = by_kind(health_run(dataset=dataset))
    kind = found[Kind.LABEL_KIND]
    assert kind.severity == "warning" and kind.image_ids == [labelled.pk]
    assert "1 polygon" in kind.message and "expected box labels" in kind.message
    unlabelled = found[Kind.UNLABELLED]
    assert unlabelled.severity == "info" and unlabelled.image_ids == [bare.pk]
    # Training refuses a version without val (Ultralytics measures each epoch on it), and the
    # health check says so in the same words: an error (datasets.services.version_checks).
    assert found[Kind.NO_VAL].severity == "error"
    assert found[Kind.NO_VAL].message.startswith("No image is in the val split.")
    dataset.refresh_from_db()
    assert (dataset.health_errors, dataset.health_warnings) == (1, 1)


def test_classify_images_without_tags_are_not_called_unlabelled():
    dataset = DatasetFactory(task="classify")
    add_image(dataset, PHOTO.read_bytes())
    add_image(dataset, OTHER_PHOTO.read_bytes(), split="val")
    assert Kind.UNLABELLED not in {f.kind for f in health_run(dataset=dataset)}


def test_an_empty_dataset_has_no_findings():
    dataset = DatasetFactory()
    assert health_run(dataset=dataset) == []
    dataset.refresh_from_db()
    assert dataset.health_checked_at is not None


def test_image_ids_are_capped_and_the_message_says_the_total():
    dataset = DatasetFactory()
    blobs = [
        blob_for(png_bytes(8, 8, color=(i % 256, i // 256, 7))) for i in range(MAX_IMAGE_IDS + 5)
    ]
    Image.objects.bulk_create(
        Image(dataset=dataset, blob=b, filename=f"{i}.png", split="val")
        for i, b in enumerate(blobs)
    )
    found = by_kind(health_run(dataset=dataset))
    unlabelled = found[Kind.UNLABELLED]
    assert len(unlabelled.image_ids) == MAX_IMAGE_IDS
    assert f"Images without labels: {MAX_IMAGE_IDS + 5}." in unlabelled.message
    assert f"the first {MAX_IMAGE_IDS} are linked" in unlabelled.message


def test_findings_are_replaced_on_rerun():
    dataset, cls = healthy_dataset()
    image = dataset.images.first()
    bad = add_label(image, cls, [0.5, 1.5, 0.1, 0.1])
    first = by_kind(health_run(dataset=dataset))
    assert Kind.LABEL_OUTSIDE in first
    dataset.refresh_from_db()
    assert dataset.health_errors == 1
    checked = dataset.health_checked_at

    bad.data = [0.5, 0.5, 0.1, 0.1]
    bad.save()
    assert health_run(dataset=dataset) == []
    assert not HealthFinding.objects.filter(dataset=dataset).exists()
    dataset.refresh_from_db()
    assert dataset.health_errors == 0 and dataset.health_checked_at > checked


def test_other_datasets_findings_are_left_alone():
    dataset, _ = healthy_dataset()
    other = DatasetFactory()
    HealthFinding.objects.create(dataset=other, kind="no_val", severity="warning", message="x")
    health_run(dataset=dataset)
    assert HealthFinding.objects.filter(dataset=other).count() == 1


def test_two_thousand_images_speed(capsys):
    """Not a timed assertion: prints the figure. Also proves the banding finds one planted pair."""
    dataset = DatasetFactory()
    rng = random.Random(2024)
    blobs = []
    for _ in range(2000):  # 640×480 JPEGs of smooth random colour fields, all different
        cells = PILImage.frombytes("RGB", (8, 6), rng.randbytes(8 * 6 * 3))
        out = io.BytesIO()
        smooth = cells.resize((160, 120), PILImage.Resampling.BILINEAR)
        smooth.resize((640, 480), PILImage.Resampling.NEAREST).save(out, "JPEG", quality=85)
        data = out.getvalue()
        blob = Blob(
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            content_type="image/jpeg",
            width=640,
            height=480,
        )
        default_storage.save(blob.storage_key, ContentFile(data))
        blobs.append(blob)
    blobs = Blob.objects.bulk_create(blobs)
    images = Image.objects.bulk_create(
        Image(dataset=dataset, blob=b, filename=f"g{i}.jpg", split="val" if i % 5 == 0 else "train")
        for i, b in enumerate(blobs)
    )
    planted = add_image(dataset, reencode(PHOTO.read_bytes(), quality=90), split="train")
    copy = add_image(dataset, reencode(PHOTO.read_bytes(), brightness=1.05), split="val")

    started = time.perf_counter()
    found = by_kind(health_run(dataset=dataset))
    first = time.perf_counter() - started
    started = time.perf_counter()
    health_run(dataset=dataset)
    second = time.perf_counter() - started
    with capsys.disabled():
        print(f"\nhealth_run on {len(images) + 2} images: {first:.1f} s, rerun {second:.1f} s")
    assert sorted(found[Kind.LEAKAGE].image_ids) == sorted([planted.pk, copy.pk])
    assert Kind.NEAR_DUPLICATE not in found


# --- training policy --------------------------------------------------------------------------


def test_training_blocked_reason_follows_the_workspace_setting(team):
    dataset, cls = healthy_dataset(workspace=team.workspace)
    assert dataset_training_blocked_reason(dataset=dataset) is None  # setting off

    team.workspace.block_training_on_dataset_errors = True
    team.workspace.save()
    dataset = Dataset.objects.get(pk=dataset.pk)
    reason = dataset_training_blocked_reason(dataset=dataset)
    assert reason and "has not run" in reason

    health_run(dataset=dataset)
    assert dataset_training_blocked_reason(dataset=dataset) is None  # clean

    add_label(dataset.images.first(), cls, [2, 2, 0.1, 0.1])
    health_run(dataset=dataset)
    reason = dataset_training_blocked_reason(dataset=dataset)
    assert reason and "found 1 error" in reason


def test_admin_sets_the_policy_and_an_editor_cannot(team, stranger, client):
    url = reverse("workspace_dataset_health_policy", kwargs={"ws_slug": "acme"})
    settings_url = reverse("workspace_settings", kwargs={"ws_slug": "acme"})

    client.force_login(team.admin)
    page = client.get(settings_url).content.decode()
    assert (
        'name="block_training"' in page and " checked" not in page.split("block-training")[1][:40]
    )
    assert client.post(url, {"block_training": "on"}).status_code == 302
    team.workspace.refresh_from_db()
    assert team.workspace.block_training_on_dataset_errors is True
    assert 'block-training" checked' in client.get(settings_url).content.decode()
    client.post(url, {})
    team.workspace.refresh_from_db()
    assert team.workspace.block_training_on_dataset_errors is False

    client.force_login(team.editor)
    assert client.post(url, {"block_training": "on"}).status_code == 403
    team.workspace.refresh_from_db()
    assert team.workspace.block_training_on_dataset_errors is False
    page = client.get(settings_url).content.decode()
    assert 'name="block_training"' not in page and "is <strong>allowed</strong>" in page

    client.force_login(stranger)
    assert client.post(url, {"block_training": "on"}).status_code == 404


# --- the page and the button ------------------------------------------------------------------


def _health_url(dataset) -> str:
    return reverse("dataset_health", kwargs={"ws_slug": "acme", "pk": dataset.pk})


def test_health_page_groups_findings_and_links_to_their_images(team, stranger, client):
    dataset = DatasetFactory(workspace=team.workspace, name="Shop")
    cls = DatasetClassFactory(dataset=dataset, index=0, name="can")
    bad = add_image(dataset, PHOTO.read_bytes(), filename="<b>bad</b>.jpg")
    add_label(bad, cls, [0.5, 1.5, 0.1, 0.1])
    tiny = add_image(dataset, OTHER_PHOTO.read_bytes(), split="val")
    add_label(tiny, cls, [0.5, 0.5, 0.001, 0.001])
    found = by_kind(health_run(dataset=dataset))

    client.force_login(team.viewer)
    response = client.get(_health_url(dataset))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-testid="health-error"' in page and 'data-testid="health-warning"' in page
    assert page.index("health-error") < page.index("health-warning")
    gallery = reverse("dataset_gallery", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    assert f'href="{gallery}?problem={found[Kind.LABEL_OUTSIDE].pk}"' in page
    assert "&lt;b&gt;bad&lt;/b&gt;.jpg" in page and "<b>bad</b>" not in page
    assert "Run health check now" not in page  # viewers cannot run it
    assert "Last checked" in page

    client.force_login(stranger)
    assert client.get(_health_url(dataset)).status_code == 404


def test_detail_page_shows_the_health_summary(team, client):
    dataset, cls = healthy_dataset(workspace=team.workspace, name="Summary DS")
    client.force_login(team.viewer)
    url = reverse("dataset_detail", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    assert "Not checked yet" in client.get(url).content.decode()
    add_label(dataset.images.first(), cls, [3, 3, 0.1, 0.1])
    health_run(dataset=dataset)
    page = client.get(url).content.decode()
    assert "1 error" in page and _health_url(dataset) in page
    assert reverse("dataset_stats", kwargs={"ws_slug": "acme", "pk": dataset.pk}) in page


def test_editor_queues_a_run_and_the_page_says_so(team, client, django_capture_on_commit_callbacks):
    dataset, _ = healthy_dataset(workspace=team.workspace, name="Queue DS")
    run_url = reverse("dataset_health_run", kwargs={"ws_slug": "acme", "pk": dataset.pk})

    client.force_login(team.viewer)
    assert client.post(run_url).status_code == 403

    client.force_login(team.editor)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(run_url, follow=True)
    assert len(callbacks) == 1
    page = response.content.decode()
    assert "Health check queued" in page and 'data-testid="health-status"' in page
    assert ">queued<" in page

    with django_capture_on_commit_callbacks() as again:
        page = client.post(run_url, follow=True).content.decode()
    assert again == [] and "already queued or running" in page

    # while queued, htmx polls the status part alone
    part = client.get(_health_url(dataset) + "?part=status", headers={"HX-Request": "true"})
    assert part.status_code == 200 and b"queued" in part.content and b"<html" not in part.content

    health_run_task.apply(args=[dataset.pk])  # what the worker does with the message

    part = client.get(_health_url(dataset) + "?part=status", headers={"HX-Request": "true"})
    assert part.headers.get("HX-Refresh") == "true"  # done: reload to show the findings
    page = client.get(_health_url(dataset)).content.decode()
    assert "health-status" not in page and "No problems found" in page


def test_health_page_queries_do_not_grow_with_findings(team, client):
    dataset, _ = healthy_dataset(workspace=team.workspace, name="Many DS")
    ids = list(dataset.images.values_list("pk", flat=True))
    client.force_login(team.viewer)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(_health_url(dataset)).status_code == 200
        return len(ctx.captured_queries)

    Dataset.objects.filter(pk=dataset.pk).update(health_checked_at="2026-01-01T00:00Z")
    HealthFinding.objects.create(
        dataset=dataset, kind="x", severity="error", message="m", image_ids=ids
    )
    few = count()
    for severity in ("error", "warning", "info") * 4:
        HealthFinding.objects.create(
            dataset=dataset, kind="x", severity=severity, message="m", image_ids=ids
        )
    assert count() == few
    assert few <= 9  # one of them lists the versions, for a version's training checks


# --- in a real worker -------------------------------------------------------------------------


def test_health_task_runs_in_a_worker(celery_worker_process):
    dataset, cls = healthy_dataset()
    add_label(dataset.images.first(), cls, [0.5, 1.5, 0.1, 0.1])
    HealthRun.objects.create(dataset=dataset)  # the task runs the dataset's queued check
    health_run_task.apply_async(args=[dataset.pk], queue=celery_worker_process)
    deadline = time.monotonic() + 60
    while not HealthFinding.objects.filter(dataset=dataset).exists():
        assert time.monotonic() < deadline, "the worker did not run the check within 60 s"
        time.sleep(0.2)
    dataset.refresh_from_db()
    assert dataset.health_errors == 1
