"""Semantic and depth datasets where they leave Kestrel (issue 32): the labelling tools' exports
refuse them and the pages do not offer them; `data=ul://…` serves depth as Ultralytics' own
depth records (the real client converts and trains on it) and refuses semantic with the way
that works; deleting or merging a class of a semantic dataset rewrites its masks, so a version
trains on class indexes that name the right classes."""

import hashlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import yaml
from django.test import Client
from django.urls import reverse
from PIL import Image as PILImage

from core.errors import ServiceError
from datasets.models import IGNORE_INDEX, PIXEL_TASKS, DatasetClass, Image, PixelMap, Task
from datasets.services.classes import dataset_class_delete, dataset_class_merge
from datasets.services.export import FORMATS, export_run, export_yolo
from datasets.services.versions import version_create
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, LabelFactory
from tests.pixel_data import DEPTH_SCALE, SEMANTIC_CLASSES, semantic_sample
from tests.pixel_data import pixel_version_create as _pixel_version_create
from tests.platform_client import client_env
from tests.servers import app_server
from workspaces.services.keys import api_key_create

TOOLS = ("cvat", "label-studio")


def pixel_version_create(**kwargs):
    # Small: two train and one val image are all any of these tests reads.
    return _pixel_version_create(**{"train": 2, "val": 1, **kwargs})


def _page(client: Client, name: str, **kwargs) -> str:
    response = client.get(reverse(name, kwargs=kwargs))
    assert response.status_code == 200
    return response.content.decode()


def _export_links(page: str, name: str, **kwargs) -> set[str]:
    return {f for f in FORMATS if reverse(name, kwargs={**kwargs, "fmt": f}) in page}


# --- 1. the labelling tools' exports -----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("task", "what"), [("semantic", "semantic masks"), ("depth", "depth maps")]
)
def test_tool_exports_refuse_pixel_versions_with_the_reason(team, task, what):
    version = pixel_version_create(access=team.access("owner"), task=task)
    dataset = version.dataset
    for fmt, tool in (("cvat", "CVAT"), ("label-studio", "Label Studio")):
        for target in ({"version": version}, {"dataset": dataset}):
            with pytest.raises(ServiceError, match=f"The {tool} export has no place for {what}"):
                export_run(fmt=fmt, **target)

    # On the pages: the version's export link answers with the reason on its own page.
    client = Client()
    client.force_login(team.viewer)
    ws = {"ws_slug": "acme", "pk": dataset.pk}
    response = client.get(
        reverse("version_export", kwargs={**ws, "number": 1, "fmt": "cvat"}), follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("version_detail", kwargs={**ws, "number": 1})
    assert f"The CVAT export has no place for {what}" in response.content.decode()
    # Through the API: a 400 with the same words, not a server error.
    response = client.get(
        f"/api/v1/datasets/{dataset.pk}/export", {"format": "label-studio", "version": 1}
    )
    assert response.status_code == 400
    assert f"The Label Studio export has no place for {what}" in response.json()["detail"]
    # What is offered still exports: YOLO holds the maps.
    with zipfile.ZipFile(export_run(fmt="yolo", version=version)) as zf:
        folder = "masks" if task == "semantic" else "depth"
        assert sum(n.startswith(f"{folder}/") for n in zf.namelist()) == 3


@pytest.mark.django_db
def test_pages_offer_only_the_formats_that_hold_the_task(team):
    semantic = pixel_version_create(access=team.access("owner"), task="semantic").dataset
    depth = pixel_version_create(access=team.access("owner"), task="depth").dataset
    detect = DatasetFactory(workspace=team.workspace, name="Boxes")
    LabelFactory(
        image=ImageFactory(dataset=detect),
        dataset_class=DatasetClassFactory(dataset=detect, index=0, name="box"),
    )
    version_create(access=team.access("owner"), dataset=detect)
    client = Client()
    client.force_login(team.viewer)
    for dataset, expected in (
        (semantic, {"yolo", "ndjson"}),
        (depth, {"yolo", "ndjson"}),
        (detect, set(FORMATS)),
    ):
        ws = {"ws_slug": "acme", "pk": dataset.pk}
        page = _page(client, "version_detail", **ws, number=1)
        assert _export_links(page, "version_export", **ws, number=1) == expected, dataset.task
        page = _page(client, "version_list", **ws)
        assert _export_links(page, "version_export", **ws, number=1) == expected, dataset.task
        page = _page(client, "dataset_detail", **ws)
        offered = _export_links(page, "dataset_export", **ws)
        # The dataset page's card: NDJSON only where it is the second format that holds maps.
        assert offered == (expected if dataset.task in PIXEL_TASKS else expected - {"ndjson"})


# --- 2. ul:// for stock ultralytics -----------------------------------------------------------


def _key(team, scopes=("read",)) -> str:
    _, raw = api_key_create(access=team.access("owner"), name="ultralytics", scopes=list(scopes))
    return raw


def _local(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.mark.django_db
def test_ul_depth_sends_ultralytics_depth_records_with_signed_map_urls(team):
    version = pixel_version_create(access=team.access("owner"), task="depth", unmasked=1)
    dataset = version.dataset
    api = Client(headers={"Authorization": f"Bearer {_key(team)}"})
    answer = api.get("/api/datasets/acme/synthetic-depth/export").json()
    assert answer["version"] == 1 and answer["images"] == 3  # the unmasked image is left out
    response = Client().get(_local(answer["downloadUrl"]))
    assert response.status_code == 200
    head, *records = (json.loads(line) for line in _body(response).decode().splitlines())
    assert head["task"] == "depth" and head["depth_scale"] == DEPTH_SCALE
    maps = {
        i.blob.sha256: i.pixel_map.blob.sha256
        for i in Image.objects.filter(dataset=dataset, pixel_map__isnull=False).select_related(
            "blob", "pixel_map__blob"
        )
    }
    assert len(records) == len(maps) == 3
    for record in records:
        assert record["annotations"] == {}
        image_sha = urlsplit(record["url"]).path.split("/")[-2]
        depth_url = record["depth"]["url"]
        assert set(record["depth"]) == {"url"}
        # Fetched with no credentials, as the client does: the stored 16-bit PNG.
        got = Client().get(_local(depth_url))
        assert got.status_code == 200 and got["Content-Type"] == "image/png"
        data = _body(got)
        assert hashlib.sha256(data).hexdigest() == maps[image_sha]
        assert np.asarray(PILImage.open(io.BytesIO(data))).dtype == np.uint16
        # Signed for that one blob: its signature on another map's path is refused.
        other = next(sha for sha in maps.values() if sha != maps[image_sha])
        path, query = _local(depth_url).split("?")
        forged = path.replace(maps[image_sha], other).replace(maps[image_sha][:32], other[:32])
        refused = Client().get(f"{forged}?{query}")
        assert refused.status_code == 403 and "not valid" in refused.json()["error"]


@pytest.mark.django_db
def test_ul_semantic_and_mapless_depth_are_refused_with_the_way_that_works(team):
    pixel_version_create(access=team.access("owner"), task="semantic")
    api = Client(headers={"Authorization": f"Bearer {_key(team)}"})
    response = api.get("/api/datasets/acme/synthetic-semantic/export")
    assert response.status_code == 422
    error = response.json()["error"]
    assert "semantic segmentation dataset" in error and "no place for its masks" in error
    assert "as YOLO" in error and "data=<folder>/data.yaml" in error

    empty = DatasetFactory(workspace=team.workspace, name="Bare depth", task=Task.DEPTH)
    DatasetClassFactory(dataset=empty, index=0, name="depth")
    ImageFactory(dataset=empty)
    version_create(access=team.access("owner"), dataset=empty)
    response = api.get("/api/datasets/acme/bare-depth/export")
    assert response.status_code == 422 and "has no depth maps" in response.json()["error"]


CLIENT = r"""
import json
import sys
from pathlib import Path

import ultralytics.utils.callbacks.platform as reporting

reporting.TESTS_RUNNING = True  # resolution and training only: reporting is the webhooks' test
from ultralytics import YOLO
from ultralytics.data.utils import convert_ndjson_to_yolo_if_needed

what, data = sys.argv[1:]
if what == "data":
    out = str(convert_ndjson_to_yolo_if_needed(data))
else:
    model = YOLO("yolo26n-depth.yaml")
    model.train(data=data, epochs=1, imgsz=64, batch=4, device="cpu", amp=False, workers=0,
                plots=False, project=str(Path("runs").resolve()), name="ul", exist_ok=True)
    out = {"best": str(model.trainer.best), "data": str(model.trainer.args.data),
           "task": model.task, "metrics": sorted(model.trainer.metrics)}
print("RESULT " + json.dumps(out))
"""


def _run(home: Path, env: dict, *args: str):
    done = subprocess.run(  # noqa: S603 - the installed client, our own script
        [sys.executable, "-c", CLIENT, *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    results = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    return (
        done.returncode,
        (json.loads(results[-1][7:]) if results else None),
        done.stdout + done.stderr,
    )


@pytest.mark.same_on_any_database(
    "stock Ultralytics converts and trains on what the server streams; its reads run on both above"
)
@pytest.mark.slow
def test_the_stock_client_converts_and_trains_on_a_ul_depth_dataset(
    team, transactional_db, tmp_path
):
    version = pixel_version_create(access=team.access("owner"), task="depth", unmasked=1)
    pixel_version_create(access=team.access("owner"), task="semantic")
    home = tmp_path / "machine"
    home.mkdir()
    with app_server() as url:
        env = client_env(
            home / "config", ULTRALYTICS_PLATFORM_URL=url, ULTRALYTICS_API_KEY=_key(team)
        )
        code, out, log = _run(home, env, "data", "ul://acme/datasets/synthetic-depth")
        assert code == 0, log[-3000:]
        data_yaml = Path(out)
        data = yaml.safe_load(data_yaml.read_text())
        assert data["task"] == "depth" and data["depth_scale"] == DEPTH_SCALE
        assert data["names"] == {0: "depth"}
        root = data_yaml.parent
        # Each image beside its own depth map, byte for byte the stored ones.
        stored = {
            i.blob.sha256: i.pixel_map.blob.sha256
            for i in Image.objects.filter(
                dataset=version.dataset, pixel_map__isnull=False
            ).select_related("blob", "pixel_map__blob")
        }
        pairs = {}
        for image in root.glob("images/*/*"):
            depth = root / "depth" / image.parent.name / f"{image.stem}.png"
            pairs[hashlib.sha256(image.read_bytes()).hexdigest()] = hashlib.sha256(
                depth.read_bytes()
            ).hexdigest()
        assert pairs == stored

        # The person's own `yolo train data=ul://…` of a depth model, as they would type it.
        code, out, log = _run(home, env, "train", "ul://acme/datasets/synthetic-depth")
        assert code == 0, log[-3000:]
        assert out["task"] == "depth" and Path(out["best"]).is_file()
        # The version's copy (the trainer's own split argument gives it another hash suffix).
        trained_on = Path(out["data"]).parent.name
        assert trained_on.rsplit("-", 1)[0] == root.name.rsplit("-", 1)[0]
        assert "metrics/delta1" in out["metrics"]

        # A semantic dataset is refused with Kestrel's words, before anything is downloaded.
        code, _, log = _run(home, env, "data", "ul://acme/datasets/synthetic-semantic")
        assert code != 0 and "no place for its masks" in log


# --- 3. class indexes of semantic masks --------------------------------------------------------


def _yolo_masks(version) -> tuple[dict[int, str], dict[str, np.ndarray]]:
    """The names and masks (by image file name) a training run of `version` reads."""
    with zipfile.ZipFile(export_yolo(version=version)) as zf:
        names = yaml.safe_load(zf.read("data.yaml"))["names"]
        masks = {}
        for name in zf.namelist():
            if name.startswith("masks/"):
                png = np.asarray(PILImage.open(io.BytesIO(zf.read(name))))
                masks[name.split("/")[-1]] = png
    return names, masks


def _by_class(masks: dict[str, np.ndarray], names: dict[int, str]) -> dict[str, list]:
    """Each class name's pixels in every mask (sorted by file): what a model learns it as."""
    out = {}
    for name in names.values():
        index = next(i for i, n in names.items() if n == name)
        out[name] = [np.argwhere(masks[f] == index).tolist() for f in sorted(masks)]
    return out


def _check_consistent(names: dict[int, str], masks: dict[str, np.ndarray]) -> None:
    assert list(names) == list(range(len(names)))
    for file, mask in masks.items():
        values = set(np.unique(mask).tolist()) - {IGNORE_INDEX}
        assert values <= set(names), (file, values, names)


def _painted(dataset, index: int) -> int:
    return sum(
        1
        for s in PixelMap.objects.filter(image__dataset=dataset).values_list("stats", flat=True)
        if str(index) in s
    )


@pytest.mark.django_db
def test_deleting_a_class_of_a_semantic_dataset_rewrites_its_masks(team):
    owner = team.access("owner")
    first = pixel_version_create(access=owner, task="semantic")
    dataset = first.dataset
    names_before, masks_before = _yolo_masks(first)
    assert names_before == dict(enumerate(SEMANTIC_CLASSES))
    pixels = _by_class(masks_before, names_before)
    revisions = dict(Image.objects.filter(dataset=dataset).values_list("pk", "revision"))
    square = DatasetClass.objects.get(dataset=dataset, name="square")  # index 1 of 0..2
    painted = _painted(dataset, 1)
    assert painted == 3

    deleted = dataset_class_delete(access=owner, dataset_class=square, confirm_name="square")
    assert deleted == painted  # each mask that painted it counts as one of its labels
    assert list(dataset.classes.order_by("index").values_list("index", "name")) == [
        (0, "ground"),
        (1, "disc"),
    ]
    second = version_create(access=owner, dataset=dataset, note="no squares")
    names, masks = _yolo_masks(second)
    assert names == {0: "ground", 1: "disc"}
    _check_consistent(names, masks)
    # Every class keeps its own pixels under its new index; the square's are ignored now.
    after = _by_class(masks, names)
    assert after["ground"] == pixels["ground"] and after["disc"] == pixels["disc"]
    for k, file in enumerate(sorted(masks)):
        square_pixels = tuple(np.array(pixels["square"][k]).T)
        assert (masks[file][square_pixels] == IGNORE_INDEX).all()
    # The stats, label counts and revisions follow (an open editor's stale save is refused).
    for image in Image.objects.filter(dataset=dataset).select_related("pixel_map"):
        assert set(image.pixel_map.stats) <= {"0", "1"}
        assert image.label_count == len(image.pixel_map.stats)
        assert image.revision == revisions[image.pk] + 1
    # The first version still trains on what it froze.
    names_again, masks_again = _yolo_masks(first)
    assert names_again == names_before and masks_again.keys() == masks_before.keys()
    assert all(np.array_equal(masks_again[f], masks_before[f]) for f in masks_before)


@pytest.mark.django_db
def test_deleting_the_first_class_shifts_every_mask_down(team):
    owner = team.access("owner")
    first = pixel_version_create(access=owner, task="semantic")
    names_before, masks_before = _yolo_masks(first)
    pixels = _by_class(masks_before, names_before)
    ground = DatasetClass.objects.get(dataset=first.dataset, name="ground")
    dataset_class_delete(access=owner, dataset_class=ground, confirm_name="ground")
    names, masks = _yolo_masks(version_create(access=owner, dataset=first.dataset))
    assert names == {0: "square", 1: "disc"}
    _check_consistent(names, masks)
    after = _by_class(masks, names)
    assert after["square"] == pixels["square"] and after["disc"] == pixels["disc"]


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), [("square", "disc"), ("disc", "ground")])
def test_merging_classes_of_a_semantic_dataset_repaints_the_masks(team, source, target):
    owner = team.access("owner")
    first = pixel_version_create(access=owner, task="semantic")
    dataset = first.dataset
    names_before, masks_before = _yolo_masks(first)
    pixels = _by_class(masks_before, names_before)
    dataset_class_merge(
        access=owner,
        source=DatasetClass.objects.get(dataset=dataset, name=source),
        target=DatasetClass.objects.get(dataset=dataset, name=target),
    )
    names, masks = _yolo_masks(version_create(access=owner, dataset=dataset))
    assert list(names.values()) == [n for n in SEMANTIC_CLASSES if n != source]
    _check_consistent(names, masks)
    after = _by_class(masks, names)
    kept = next(n for n in SEMANTIC_CLASSES if n not in (source, target))
    assert after[kept] == pixels[kept]
    for k in range(len(masks)):
        assert sorted(after[target][k]) == sorted(pixels[target][k] + pixels[source][k])


def test_the_synthetic_masks_paint_every_class():
    # The tests above compare classes' pixels: each must have some, or they prove nothing.
    for k in range(3):
        _, mask = semantic_sample(k)
        assert {0, 1, 2, IGNORE_INDEX} <= set(np.unique(mask).tolist())
