"""Issue 34, part 3: a full disk, or a stored file cut short, never makes Kestrel serve an image
that is not the bytes it recorded.

The media folder is a real 4 MiB tmpfs the test mounts and fills (skipped, with the reason,
where this machine will not mount one); the imports are real imports of coco8, zipped here; the
images are fetched through the view that serves them."""

import hashlib
import io
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from core.storage import storage_put
from datasets.models import Blob, HealthFinding, Image, ImportStatus
from datasets.services import ingest
from datasets.services.datasets import dataset_create
from datasets.services.health import health_run
from datasets.services.health_checks import Kind
from datasets.services.ingest import dataset_import_path
from tests.datasets.archives import SHARED, zip_folder

COCO8 = SHARED / "coco8"


class SmallDisk:
    """A mounted tmpfs of 4 MiB as the media folder, filled on demand by a file of its own."""

    def __init__(self, root: Path):
        self.root = root
        self.filler = root / "filler"

    def fill(self, *, leave: int) -> None:
        """Take all but `leave` bytes of the free space."""
        st = os.statvfs(self.root)
        take = st.f_bavail * st.f_frsize - leave
        with open(self.filler, "wb") as f:
            while take > 0:
                take -= f.write(b"\0" * min(take, 1 << 20))

    def free(self) -> None:
        self.filler.unlink()

    def stored(self) -> list[Path]:
        """Every file under the folders of image bytes and thumbnails (dot files too)."""
        return sorted(
            p for top in ("blobs", "thumbs") if (self.root / top).exists()
            for p in (self.root / top).rglob("*") if p.is_file()
        )  # fmt: skip


def _media_at(settings, root: Path) -> None:
    """Stored files go to `root` (the default storage names its folder itself)."""
    settings.MEDIA_ROOT = str(root)
    default = settings.STORAGES["default"]
    options = default.get("OPTIONS", {}) | {"location": str(root)}
    settings.STORAGES = settings.STORAGES | {"default": default | {"OPTIONS": options}}


@pytest.fixture
def small_disk(tmp_path, settings):
    root = tmp_path / "media"
    root.mkdir()
    if not shutil.which("mount"):
        pytest.skip("no mount command here to mount a small tmpfs")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 4 MiB tmpfs here ({done.stderr.strip() or done.returncode})")
    _media_at(settings, root)
    try:
        yield SmallDisk(root)
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def media(tmp_path, settings) -> Path:
    """A media folder of the test's own on the ordinary disk."""
    _media_at(settings, tmp_path / "media")
    return tmp_path / "media"


@pytest.fixture(params=["threads", "processes"])
def checking(request, monkeypatch) -> str:
    """The import checks and stores images on threads, or (as from 500 images) in processes."""
    if request.param == "processes":
        monkeypatch.setattr(ingest, "PROCESS_MIN_IMAGES", 1)
        monkeypatch.setattr(ingest, "BATCH_IMAGES", 2)  # several batches, some in flight
    return request.param


def _originals() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((COCO8 / "images").rglob("*.jpg"))}


def _import(team, path: Path, dataset=None):
    access = team.access("editor")
    dataset = dataset or dataset_create(access=access, name="coco8", task="detect")
    return dataset, dataset_import_path(access=access, dataset=dataset, path=path)


def _served(client, team, image: Image):
    url = reverse(
        "dataset_image_file",
        kwargs={"ws_slug": team.workspace.slug, "pk": image.dataset_id, "image_pk": image.pk},
    )
    response = client.get(url)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, body


def _assert_every_image_served_whole(client, team, dataset) -> None:
    originals = _originals()
    images = list(Image.objects.filter(dataset=dataset).order_by("filename"))
    assert sorted(i.filename for i in images) == sorted(originals)
    client.force_login(team.viewer)
    for image in images:
        status, body = _served(client, team, image)
        assert status == 200, image.filename
        assert body == originals[image.filename], (image.filename, len(body))


@pytest.mark.django_db
def test_an_import_onto_a_full_disk_leaves_nothing_and_the_next_one_is_whole(
    team, client, tmp_path, small_disk, checking
):
    archive = zip_folder(COCO8, tmp_path / "coco8.zip", prefix="coco8/")
    small_disk.fill(leave=150_000)  # two or three of the eight images fit

    dataset, imp = _import(team, archive)

    assert imp.status == ImportStatus.FAILED
    assert not Image.objects.filter(dataset=dataset).exists()
    # Not a file cut short, not a 0-byte one, not one the failed import stored whole.
    assert small_disk.stored() == []
    assert "disk that stores images is full" in imp.error, imp.error

    small_disk.free()
    _, imp = _import(team, archive, dataset=dataset)

    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["images_imported"] == 8
    _assert_every_image_served_whole(client, team, dataset)


@pytest.mark.django_db
def test_a_write_that_fills_the_disk_leaves_nothing_at_its_key(small_disk):
    small_disk.fill(leave=40_000)
    data = (COCO8 / "images/val/000000000061.jpg").read_bytes()  # 99,547 bytes
    sha = hashlib.sha256(data).hexdigest()

    with pytest.raises(OSError) as failed:
        storage_put(f"blobs/{sha[:2]}/{sha}", data)

    assert failed.value.errno == 28  # ENOSPC
    assert small_disk.stored() == []  # neither the key nor the temporary file it was written to


@pytest.mark.django_db
def test_an_empty_or_cut_short_file_at_a_content_key_is_not_trusted(team, client, media):
    originals = _originals()
    planted = {
        "000000000009.jpg": b"",  # what a full disk left
        "000000000061.jpg": originals["000000000061.jpg"][:12_739],  # cut short
        "000000000042.jpg": bytes(len(originals["000000000042.jpg"])),  # right size, not it
    }
    for name, data in planted.items():
        sha = hashlib.sha256(originals[name]).hexdigest()
        path = media / "blobs" / sha[:2] / sha
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    dataset, imp = _import(team, COCO8)

    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    _assert_every_image_served_whole(client, team, dataset)


@pytest.mark.django_db
def test_a_cut_short_file_is_not_served_and_blobs_check_finds_marks_and_repairs_it(
    team, client, media, capsys
):
    dataset, imp = _import(team, COCO8)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    image = Image.objects.select_related("blob").get(dataset=dataset, filename="000000000036.jpg")
    blob: Blob = image.blob
    path = media / blob.storage_key
    whole = path.read_bytes()
    path.write_bytes(whole[:4096])  # a disk fault cut it short

    client.force_login(team.viewer)
    status, body = _served(client, team, image)
    assert status == 500 and body != whole[:4096]
    assert b"damaged" in body

    # The health check holds every file to its row.
    health_run(dataset=dataset)
    damaged = HealthFinding.objects.get(dataset=dataset, kind=Kind.STORED_DAMAGED)
    assert damaged.image_ids == [image.pk]
    assert not HealthFinding.objects.filter(dataset=dataset, kind=Kind.UNREADABLE).exists()
    HealthFinding.objects.filter(dataset=dataset).delete()

    with pytest.raises(CommandError, match="1 stored image files are damaged"):
        call_command("blobs_check")
    out = capsys.readouterr().out
    assert f"{blob.storage_key}: 4,096 bytes stored, {blob.size:,} expected" in out
    assert "000000000036.jpg" in out

    # No good copy: marked on the dataset's health page, with the image. A file a killed
    # write left under its temporary name a day ago goes too.
    stale = path.with_name(f".{path.name}.0123abcd.part")
    stale.write_bytes(whole[:100])
    os.utime(stale, (1, 1))
    with pytest.raises(CommandError, match="could not be repaired"):
        call_command("blobs_check", "--repair")
    assert not stale.exists()
    finding = HealthFinding.objects.get(dataset=dataset, kind=Kind.STORED_DAMAGED)
    assert finding.image_ids == [image.pk]
    page = client.get(
        reverse("dataset_health", kwargs={"ws_slug": team.workspace.slug, "pk": dataset.pk})
    ).content.decode()
    assert "1 image whose stored file is damaged or missing" in page
    assert "000000000036.jpg" in page

    # A folder of the originals holds a good copy.
    call_command("blobs_check", "--repair", "--from", str(COCO8))
    assert "stored again from" in capsys.readouterr().out
    assert path.read_bytes() == whole
    assert not HealthFinding.objects.filter(dataset=dataset, kind=Kind.STORED_DAMAGED).exists()
    status, body = _served(client, team, image)
    assert status == 200 and body == whole
    call_command("blobs_check", "--hash")
    assert "Every stored image file is whole." in capsys.readouterr().out


@pytest.mark.django_db
def test_blobs_check_repairs_from_a_stored_training_archive(team, client, media, capsys):
    dataset, imp = _import(team, COCO8)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    image = Image.objects.select_related("blob").get(dataset=dataset, filename="000000000049.jpg")
    path = media / image.blob.storage_key
    whole = path.read_bytes()
    # The archive a remote trainer was sent of a version (training.remote): the stored bytes.
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("images/val/000000000049.jpg", whole)
    storage_put("training/datasets/" + "ab" * 32 + ".zip", archive.getvalue())
    path.write_bytes(b"")  # the disk lost it

    call_command("blobs_check", "--repair")

    out = capsys.readouterr().out
    assert f"{image.blob.storage_key}: 0 bytes stored, {len(whole):,} expected" in out
    assert "stored again from training/datasets/" in out
    client.force_login(team.viewer)
    assert _served(client, team, image) == (200, whole)
