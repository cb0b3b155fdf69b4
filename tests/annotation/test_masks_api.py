"""The mask API the editor paints through: a semantic mask saved as a PNG of class indexes
(revision-checked, sized to its image, values within the classes) and read back as raw values;
a depth map read back exact to the 16-bit value; who may read and who may save."""

import io
import zlib

import numpy as np
import pytest
from django.test import Client
from PIL import Image as PILImage

from datasets.models import Image, LabelStatus, PixelMap
from datasets.services.pixel_maps import pixel_map_load, pixel_map_save, png_encode
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory

pytestmark = pytest.mark.django_db

W, H = 64, 48  # ImageFactory's size


@pytest.fixture
def semantic(team):
    dataset = DatasetFactory(workspace=team.workspace, task="semantic", name="Roads")
    for i, name in enumerate(["road", "car", "tree"]):
        DatasetClassFactory(dataset=dataset, index=i, name=name)
    return ImageFactory(dataset=dataset)


@pytest.fixture
def depth(team):
    dataset = DatasetFactory(workspace=team.workspace, task="depth", name="Rooms", depth_scale=256)
    return ImageFactory(dataset=dataset)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _mask() -> np.ndarray:
    mask = np.full((H, W), 255, np.uint8)
    mask[5:20, 10:30] = 1
    mask[30:40, 0:8] = 2
    mask[0, 0] = 0
    return mask


def _put(client, image, data: bytes, revision=0):
    return client.put(
        f"/api/v1/images/{image.pk}/mask?revision={revision}", data, content_type="image/png"
    )


def _raw(response) -> np.ndarray:
    dtype = {"uint8": np.uint8, "uint16": "<u2"}[response["X-Dtype"]]
    values = np.frombuffer(zlib.decompress(response.content), dtype=dtype)
    return values.reshape(int(response["X-Height"]), int(response["X-Width"]))


def test_save_then_load_a_mask(team, semantic):
    client = _client(team.editor)
    mask = _mask()
    response = _put(client, semantic, png_encode(mask))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["revision"] == 1 and body["status"] == "labelled"
    assert body["stats"] == {"0": 1, "1": 15 * 20, "2": 10 * 8}
    stored = pixel_map_load(PixelMap.objects.get(image=semantic))
    assert np.array_equal(stored, mask)
    semantic.refresh_from_db()
    assert semantic.labelled_by == team.editor and semantic.label_count == 3

    loaded = client.get(f"/api/v1/images/{semantic.pk}/pixels")
    assert loaded.status_code == 200
    assert loaded["X-Revision"] == "1" and loaded["Cache-Control"] == "private, no-store"
    assert np.array_equal(_raw(loaded), mask)

    # Saved again from revision 1: all ignore; still labelled (saved empty, as labels are).
    empty = np.full((H, W), 255, np.uint8)
    assert _put(client, semantic, png_encode(empty), revision=1).json()["revision"] == 2
    assert np.array_equal(pixel_map_load(PixelMap.objects.get(image=semantic)), empty)
    assert Image.objects.get(pk=semantic.pk).status == LabelStatus.LABELLED


def test_no_mask_yet_is_204_with_the_revision(team, semantic):
    response = _client(team.viewer).get(f"/api/v1/images/{semantic.pk}/pixels")
    assert response.status_code == 204 and response["X-Revision"] == "0"


def test_an_rgba_canvas_png_of_grey_indexes_is_refused_with_why(team, semantic):
    """A colour PNG names no class: the editor sends greyscale; the refusal says what to send."""
    rgba = np.dstack([_mask()] * 3 + [np.full((H, W), 255, np.uint8)])
    out = io.BytesIO()
    PILImage.fromarray(rgba, "RGBA").save(out, format="PNG")
    response = _put(_client(team.editor), semantic, out.getvalue())
    assert response.status_code == 400
    assert "greyscale" in response.json()["detail"]


def test_stale_revision_is_refused_and_nothing_is_written(team, semantic):
    _put(_client(team.admin), semantic, png_encode(_mask()))  # someone else saved first
    response = _put(_client(team.editor), semantic, png_encode(np.zeros((H, W), np.uint8)))
    assert response.status_code == 409
    assert response.json()["revision"] == 1
    assert "admin" in response.json()["detail"]
    assert np.array_equal(pixel_map_load(PixelMap.objects.get(image=semantic)), _mask())
    assert Image.objects.get(pk=semantic.pk).revision == 1


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (png_encode(np.zeros((H, W + 1), np.uint8)), "the mask is 65×48 but the image is 64×48"),
        (png_encode(np.full((H, W), 3, np.uint8)), "values 3 are outside the 3 classes"),
        (b"GIF89a not a png at all" * 3, "not a PNG"),
        (b"", "not a PNG"),
    ],
    ids=["wrong-size", "class-out-of-range", "not-png", "empty"],
)
def test_bad_masks_are_refused_with_the_reason(team, semantic, data, says):
    response = _put(_client(team.editor), semantic, data)
    assert response.status_code == 400, response.content
    assert says in response.json()["detail"]
    assert not PixelMap.objects.filter(image=semantic).exists()
    assert Image.objects.get(pk=semantic.pk).revision == 0


def test_revision_must_be_given(team, semantic):
    client = _client(team.editor)
    response = client.put(
        f"/api/v1/images/{semantic.pk}/mask", png_encode(_mask()), content_type="image/png"
    )
    assert response.status_code == 400 and "revision" in response.json()["detail"]


def test_a_mask_on_a_depth_or_detect_dataset_is_refused(team, depth):
    response = _put(_client(team.editor), depth, png_encode(np.zeros((H, W), np.uint8)))
    assert response.status_code == 400 and "semantic" in response.json()["detail"]


def test_a_rejected_image_saved_again_goes_back_to_labelled(team, semantic):
    Image.objects.filter(pk=semantic.pk).update(status=LabelStatus.REJECTED)
    assert _put(_client(team.editor), semantic, png_encode(_mask())).status_code == 200
    assert Image.objects.get(pk=semantic.pk).status == LabelStatus.LABELLED


@pytest.mark.parametrize(
    ("role", "read", "write"),
    [("owner", 200, 200), ("editor", 200, 200), ("viewer", 200, 403), ("stranger", 404, 404)],
)
def test_who_may_read_and_save(team, stranger, semantic, role, read, write):
    pixel_map_save(image=semantic, array=_mask())
    client = _client(stranger if role == "stranger" else team.user(role))
    response = client.get(f"/api/v1/images/{semantic.pk}/pixels")
    assert response.status_code == read
    if read == 200:
        assert np.array_equal(_raw(response), _mask())
    else:
        assert response.json()["detail"] == "No such image."  # as for an id that is not there
    saved = _put(client, semantic, png_encode(np.zeros((H, W), np.uint8)), revision=1)
    assert saved.status_code == write, saved.content
    expected = np.zeros((H, W), np.uint8) if write == 200 else _mask()
    assert np.array_equal(pixel_map_load(PixelMap.objects.get(image=semantic)), expected)


def test_depth_values_come_back_exact(team, depth):
    """Every 16-bit value survives, the ones an 8-bit decode would fold together too."""
    values = np.arange(W * H, dtype=np.uint32).reshape(H, W) * 21 % 65536
    values[0, :4] = [0, 1, 256, 65535]
    values = values.astype(np.uint16)
    pixel_map_save(image=depth, array=values)
    response = _client(team.viewer).get(f"/api/v1/images/{depth.pk}/pixels")
    assert response.status_code == 200
    assert response["X-Dtype"] == "uint16"
    assert np.array_equal(_raw(response), values)


def test_editor_page_of_each_pixel_task_gives_the_urls_and_depth_scale(team, semantic, depth):
    client = _client(team.viewer)
    for image in (semantic, depth):
        ds = image.dataset
        page = client.get(f"/w/{ds.workspace.slug}/datasets/{ds.pk}/images/{image.pk}/annotate/")
        assert page.status_code == 200
        data = page.context["editor_data"]
        assert data["pixels_url"] == f"/api/v1/images/{image.pk}/pixels"
        assert data["mask_url"] == f"/api/v1/images/{image.pk}/mask"
    assert data["dataset"]["depth_scale"] == 256.0
