"""The model server's decode (deploy.inference.inputs.image_decode) refuses a damaged image
exactly when an import would (datasets.services.images.image_check), with the import's reason,
in its one decode: the web no longer decodes every pixel a second time (bench/predict.py). What
it accepts, it gives as OpenCV gave it: the same BGR pixels, turned upright as the EXIF says."""

import io

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from datasets.services.images import ImageRejected, image_check
from deploy.inference.inputs import InferenceError, image_decode
from tests.deploy.conftest import SHARED

PHOTO = SHARED / "coco8" / "images" / "val" / "000000000061.jpg"
MAX_PIXELS = 64_000_000


def _encoded(fmt: str, size=(160, 122), **options) -> bytes:
    with Image.open(PHOTO) as photo:
        picture = photo.resize(size)
    if options.pop("gray", False):
        picture = picture.convert("L")
    if options.pop("cmyk", False):
        picture = picture.convert("CMYK")
    out = io.BytesIO()
    picture.save(out, format=fmt, **options)
    return out.getvalue()


FILES = {
    "jpeg": _encoded("JPEG", quality=90),
    "progressive": _encoded("JPEG", quality=90, progressive=True),
    "gray": _encoded("JPEG", gray=True),
    "png": _encoded("PNG"),
    "webp": _encoded("WEBP", quality=80),
    "bmp": _encoded("BMP"),
}


def _opencv(data: bytes) -> np.ndarray | None:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)


def _import_refuses(data: bytes) -> str | None:
    try:
        image_check(data)
    except ImageRejected as exc:
        return str(exc)
    return None


def _server_refuses(data: bytes) -> str | None:
    try:
        image_decode(data, MAX_PIXELS)
    except InferenceError as exc:
        assert exc.status == 400
        return exc.detail
    return None


def _marker_mid_scan(data: bytes, marker: bytes) -> bytes:
    middle = data.index(b"\xff\xda") + (len(data) - data.index(b"\xff\xda")) // 2
    return data[:middle] + marker + data[middle:]


@pytest.mark.parametrize("name", ["jpeg", "progressive", "gray"])
def test_a_whole_jpeg_gives_opencvs_pixels(name):
    """simplejpeg's decode, which the server now uses for these, against OpenCV's (other
    formats are still OpenCV's own)."""
    data = FILES[name]
    assert np.array_equal(image_decode(data, MAX_PIXELS), _opencv(data))


def test_a_cmyk_jpeg_and_a_phones_mpo_give_opencvs_pixels():
    cmyk = _encoded("JPEG", cmyk=True)
    assert np.array_equal(image_decode(cmyk, MAX_PIXELS), _opencv(cmyk))
    # An MPO: a JPEG, then the phone's other pictures; the first one is the picture.
    mpo = FILES["jpeg"] + _encoded("JPEG", size=(64, 48))
    assert np.array_equal(image_decode(mpo, MAX_PIXELS), _opencv(FILES["jpeg"]))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_photo_is_turned_upright_as_its_exif_says(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _encoded("JPEG", size=(96, 64), exif=exif.tobytes())
    decoded = image_decode(data, MAX_PIXELS)
    assert decoded.flags["C_CONTIGUOUS"]
    assert np.array_equal(decoded, _opencv(data))
    assert decoded.shape[:2] == ((64, 96) if orientation < 5 else (96, 64))


def test_a_truncated_or_broken_jpeg_is_refused_with_the_imports_reason():
    """A file cut short, and a marker no JPEG may have in the middle of its scan: refused as an
    import refuses them. OpenCV decoded the second without a word, and the model answered on
    a broken picture."""
    jpeg = FILES["jpeg"]
    for damaged in (jpeg[: len(jpeg) * 3 // 4], _marker_mid_scan(jpeg, b"\xff\x3b")):
        detail = _server_refuses(damaged)
        assert detail and detail.startswith(
            "The file is not a usable image: unreadable or truncated image ("
        )
        assert _import_refuses(damaged)
    assert _opencv(_marker_mid_scan(jpeg, b"\xff\x3b")) is not None  # what the server used


def _damage(name: str, kind: str, at: float, value: int) -> bytes:
    """FILES[name] cut short, a byte changed, bytes dropped, or bytes added after its end, at
    `at` (0 to 1) of the way past its first 100 bytes."""
    data = bytearray(FILES[name])
    where = 100 + int(at * (len(data) - 160))
    if kind == "cut":
        return bytes(data[:where])
    if kind == "flip":
        data[where] = value
    elif kind == "drop":
        del data[where : where + 1 + value % 50]
    else:
        data += bytes(range(value)) * 8
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(FILES)),
    kind=st.sampled_from(["cut", "flip", "drop", "tail"]),
    at=st.floats(0, 1),
    value=st.integers(0, 255),
)
@example(name="jpeg", kind="drop", at=0.015625, value=0)  # a Huffman table: the import takes it
@example(name="progressive", kind="cut", at=0.99, value=0)
def test_a_damaged_file_is_refused_when_and_only_when_an_import_refuses_it(name, kind, at, value):
    """Cut short, a byte changed, bytes dropped, bytes after its end: whatever the damage, the
    model server and an import decide alike. Damage a viewer draws past (libjpeg's "Corrupt
    JPEG data" warnings) is accepted by both."""
    data = _damage(name, kind, at, value)
    assert (_server_refuses(data) is None) == (_import_refuses(data) is None)


@pytest.mark.parametrize("marker", [b"\xff\x3b", b"\xff\xc8", b"\xff\x01"])
def test_a_marker_in_the_middle_of_a_scan_is_decided_as_an_import_decides_it(marker):
    data = _marker_mid_scan(FILES["jpeg"], marker)
    assert (_server_refuses(data) is None) == (_import_refuses(data) is None)
