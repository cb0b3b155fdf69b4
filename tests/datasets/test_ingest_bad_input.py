"""Bad input: each case is refused with a reason, and a fatal one writes nothing at all."""

import io
import zipfile

import pytest
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from datasets.models import Blob, Image, ImportStatus, Label
from datasets.services.archive import Archive, ArchiveError, Limits
from datasets.services.datasets import dataset_create
from datasets.services.images import ImageRejected, image_check
from datasets.services.ingest import dataset_import_path, display_name
from tests.datasets.archives import (
    jpeg_bytes,
    tar_of,
    zip_of,
    zip_overlapping,
    zip_with_raw_name,
    zip_with_symlink,
)


def _import(team, path, task="detect", classes=None):
    access = team.access("editor")
    dataset = dataset_create(access=access, name=path.name, task=task, class_names=classes)
    return dataset, dataset_import_path(access=access, dataset=dataset, path=path)


def _stored_blobs() -> set[str]:
    if not default_storage.exists("blobs"):
        return set()
    return {
        f"{d}/{f}"
        for d in default_storage.listdir("blobs")[0]
        for f in default_storage.listdir(f"blobs/{d}")[1]
    }


def _fatal(team, path, message, task="detect"):
    before = _stored_blobs()
    dataset, imp = _import(team, path, task)
    assert imp.status == ImportStatus.FAILED
    assert message in imp.error, imp.error
    assert "nothing was imported" in imp.error.lower()
    assert not Image.objects.filter(dataset=dataset).exists()
    assert not Label.objects.filter(image__dataset=dataset).exists()
    assert not Blob.objects.filter(images__isnull=True).exists()
    assert _stored_blobs() == before  # bytes stored before the failure were removed again
    return imp


# --- archives: fatal ---------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("../../etc/x.jpg", "'..'"),
        ("/etc/passwd.jpg", "absolute path"),
        ("C:\\evil\\aaa.jpg", "absolute path"),
    ],
)
def test_unsafe_paths_are_fatal(team, tmp_path, raw, message):
    _fatal(team, zip_with_raw_name(tmp_path / "evil.zip", raw), message)


@pytest.mark.django_db
def test_links_are_fatal_in_zip_and_tar(team, tmp_path):
    _fatal(team, zip_with_symlink(tmp_path / "link.zip"), "link")
    tar = tar_of({"ok.jpg": jpeg_bytes()}, tmp_path / "link.tar.gz", links={"x.jpg": "/etc/passwd"})
    _fatal(team, tar, "link")


@pytest.mark.django_db
def test_too_many_entries_is_fatal(tmp_path):
    files = {f"{i}.txt": b"" for i in range(11)}
    with pytest.raises(ArchiveError, match="11 entries; the limit is 10"):
        Archive(zip_of(files, tmp_path / "many.zip").open("rb"), Limits(max_entries=10))


@pytest.mark.django_db
def test_an_entry_inflating_past_the_per_file_cap_is_fatal(tmp_path):
    path = zip_of({"big.jpg": b"\0" * (3 * 2**20)}, tmp_path / "big.zip")
    archive = Archive(path.open("rb"), Limits(max_entry_bytes=2**20, max_ratio=10**6))
    with pytest.raises(ArchiveError, match="limit for one file"):
        archive.read("big.jpg")


@pytest.mark.django_db
def test_absurd_compression_ratio_is_fatal(team, tmp_path):
    # 20 MiB of zeros deflate to ~20 KiB: counted as it inflates, stopped past 200x.
    _fatal(team, zip_of({"bomb.jpg": b"\0" * (20 * 2**20)}, tmp_path / "bomb.zip"), "inflates more")


@pytest.mark.django_db
def test_total_over_the_plan_limit_is_fatal(team, tmp_path):
    plan = team.workspace.plan
    plan.max_import_inflated_bytes = 20_000
    plan.save()
    files = {f"{i}.jpg": jpeg_bytes(200, 200, color=(i * 20, 0, 0)) for i in range(12)}
    _fatal(team, zip_of(files, tmp_path / "large.zip"), "your plan's limit")


@pytest.mark.django_db
def test_gzip_bomb_tar_is_fatal_before_filling_the_disk(team, tmp_path):
    plan = team.workspace.plan
    plan.max_import_inflated_bytes = 2**20
    plan.save()
    tar = tar_of({"zeros.jpg": b"\0" * (4 * 2**20)}, tmp_path / "bomb.tar.gz")
    _fatal(team, tar, "limit")


@pytest.mark.django_db
def test_overlapping_zip_entries_are_fatal(team, tmp_path):
    _fatal(team, zip_overlapping(tmp_path / "overlap.zip"), "overlap")


@pytest.mark.django_db
def test_encrypted_and_non_archives_are_fatal(team, tmp_path):
    html = tmp_path / "page.zip"
    html.write_bytes(b"<html><body>not an archive</body></html>")
    _fatal(team, html, "not a zip or tar")


# --- single files: skipped and listed ------------------------------------------------------


def _png(width, height, mode="RGB") -> bytes:
    out = io.BytesIO()
    PILImage.new(mode, (width, height)).save(out, format="PNG")
    return out.getvalue()


def _gif() -> bytes:
    out = io.BytesIO()
    PILImage.new("P", (8, 8)).save(out, format="GIF")
    return out.getvalue()


def _ico() -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (16, 16)).save(out, format="ICO")
    return out.getvalue()


@pytest.mark.django_db
def test_bad_images_are_skipped_with_reasons(team, tmp_path, settings):
    settings.DATASET_MAX_IMAGE_PIXELS = 1_000_000
    good = jpeg_bytes(color=(0, 200, 0))
    files = {
        "good.jpg": good,
        "png-named.jpg": _png(10, 10),
        "page.jpg": b"<!doctype html><html><script>alert(1)</script></html>",
        "vector.png": b'<svg xmlns="http://www.w3.org/2000/svg"><script>x</script></svg>',
        "anim.jpg": _gif(),  # a GIF whatever its name: its first frame, stored as PNG
        "icon.png": _ico(),
        "cut.jpg": jpeg_bytes(color=(200, 0, 0))[:300],
        "huge.png": _png(2000, 1000, mode="1"),
        "notes.docx": b"PK whatever",
        "inner.zip": b"PK\x03\x04",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "mixed.zip"))
    assert imp.status == ImportStatus.SUCCEEDED
    reasons = {s["file"]: s["reason"] for s in imp.report["skipped"]}
    assert imp.report["images_imported"] == 3  # good.jpg, the PNG and the GIF named .jpg
    assert (
        Image.objects.get(dataset=dataset, filename="png-named.jpg").blob.content_type
        == "image/png"
    )
    assert "not an image" in reasons["page.jpg"]
    assert "not an image" in reasons["vector.png"]
    assert Image.objects.get(dataset=dataset, filename="anim.jpg").blob.content_type == "image/png"
    assert "unsupported image format ICO" in reasons["icon.png"]
    assert "truncated" in reasons["cut.jpg"]
    assert "megapixels" in reasons["huge.png"]
    assert reasons["notes.docx"] == "unsupported file"
    assert reasons["inner.zip"] == "nested archive (not unpacked)"


def test_pillow_decompression_bomb_is_an_error_not_a_warning(settings):
    settings.DATASET_MAX_IMAGE_PIXELS = 10**12  # only Pillow's own check left
    with pytest.raises(ImageRejected, match="decompression bomb|megapixels"):
        image_check(_png(20000, 20000, mode="1"))


@pytest.mark.django_db
def test_bad_label_lines_are_skipped_one_by_one(team, tmp_path):
    files = {
        "data.yaml": b"names: ['a', 'b']\n",
        "images/train/x.jpg": jpeg_bytes(color=(10, 10, 10)),
        "labels/train/x.txt": (
            b"0 0.5 0.5 0.2 0.2\n"  # good
            b"1 0.5 0.5 0.2\n"  # wrong column count
            b"0 nan 0.5 0.2 0.2\n"  # NaN
            b"0 -0.5 0.5 0.2 0.2\n"  # negative
            b"0 0.5 1.5 0.2 0.2\n"  # > 1
            b"7 0.5 0.5 0.2 0.2\n"  # class out of range
            b"x 0.5 0.5 0.2 0.2\n"  # class not an integer
        ),
        "images/train/y.jpg": jpeg_bytes(color=(90, 10, 10)),
        "labels/train/y.txt": b"\xff\xfe\x00garbage",  # not UTF-8
        "images/train/z.jpg": jpeg_bytes(color=(170, 10, 10)),
        "labels/train/z.txt": b"0 0.5 0.5 0.1 0.1\n" * 60_000,  # > 1 MiB
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "labels.zip"))
    assert imp.report["images_imported"] == 3 and imp.report["labels_imported"] == 1
    reasons = [f"{s['file']}: {s['reason']}" for s in imp.report["skipped"]]
    for expected in [
        "x.txt:2: label 4 columns",
        "x.txt:3: label NaN",
        "x.txt:4: label coordinates outside 0..1",
        "x.txt:5: label coordinates outside 0..1",
        "x.txt:6: label class id 7 out of range",
        "x.txt:7: label class id 'x' is not an integer",
        "y.txt: label file not UTF-8 text",
        "z.txt: label file larger than 1 MiB",
    ]:
        assert any(expected in r for r in reasons), (expected, reasons)


@pytest.mark.django_db
def test_unknown_coco_image_and_category_ids_are_listed(team, tmp_path):
    import json

    coco = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
        "categories": [{"id": 1, "name": "a"}],
        "annotations": [
            {"id": 10, "image_id": 5, "category_id": 1, "bbox": [1, 1, 5, 5]},
            {"id": 11, "image_id": 1, "category_id": 3, "bbox": [1, 1, 5, 5]},
            {"id": 12, "image_id": 1, "category_id": 1, "bbox": [1, 1, "nan", 5]},
            {"id": 13, "image_id": 1, "category_id": 1, "bbox": [60, 40, 50, 50]},
        ],
    }
    files = {"coco.json": json.dumps(coco).encode(), "a.jpg": jpeg_bytes()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "coco.zip"))
    reasons = " | ".join(s["reason"] for s in imp.report["skipped"])
    assert "unknown image id 5" in reasons and "unknown category id 3" in reasons
    assert "NaN" in reasons and "outside the image" in reasons
    assert imp.report["labels_imported"] == 0


@pytest.mark.django_db
def test_strange_file_names_are_stored_clean_and_bytes_under_the_hash(team, tmp_path):
    names = {
        "rtl\u202egpj.exe.jpg": jpeg_bytes(color=(1, 100, 1)),
        ("a" * 300) + ".jpg": jpeg_bytes(color=(1, 1, 200)),
        "<img src=x onerror=alert(1)>.jpg": jpeg_bytes(color=(200, 200, 1)),
    }
    with zipfile.ZipFile(tmp_path / "names.zip", "w") as zf:
        for name, data in names.items():
            zf.writestr(name, data)
    dataset, imp = _import(team, tmp_path / "names.zip")
    assert imp.report["images_imported"] == 3, imp.report["skipped"]
    stored = set(Image.objects.filter(dataset=dataset).values_list("filename", flat=True))
    assert "rtlgpj.exe.jpg" in stored  # the right-to-left override is gone
    assert "<img src=x onerror=alert(1)>.jpg" in stored  # kept as text; templates escape it
    assert all(len(n) <= 255 for n in stored)
    for blob in Blob.objects.filter(images__dataset=dataset):
        assert blob.storage_key.endswith(blob.sha256)


def test_display_name_drops_nul_and_control_characters():
    assert display_name("dir/a\x00b\u200fc.jpg") == "abc.jpg"
    assert display_name("\u202e") == "unnamed"
    assert len(display_name("x" * 400)) == 255


def test_a_non_image_is_refused_in_a_process_that_imported_ultralytics():
    """Ultralytics patches Image.open to try a HEIF plugin on what Pillow cannot identify; a
    worker that also runs models must still refuse a non-image cleanly, not crash the import."""
    from annotation.assist import predict
    from datasets.services.images import ImageRejected, image_check

    predict._ultralytics_env()
    import ultralytics.utils.patches  # noqa: F401  (the patch is applied on import)

    with pytest.raises(ImageRejected, match="not an image"):
        image_check(b"plain text, not pixels")
