"""Uploading into a dataset: resumable chunks, the plain form, the API, bad input, cleanup.

No worker runs here: a completed upload is checked to be queued and its task published to the
real Redis broker (the message is then taken off the queue again), never imported.
"""

import base64
import io
import json
import math
import os
import random
import re
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from celery.signals import after_task_publish
from django.conf import settings as django_settings
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from PIL import Image as PILImage

from core.errors import ServiceError
from datasets.models import Import, ImportStatus, UploadChunk
from datasets.services.uploads import (
    STALE_ERROR,
    upload_chunks_delete,
    upload_store_whole,
    uploads_expire_stale,
)
from tests.browser.conftest import (  # noqa: F401 - the team's browser fixtures, reused
    browser_problems,
    chromium_browser,
    new_page,
    new_page_at,
    screenshot,
)
from tests.datasets.factories import DatasetFactory
from workspaces.services.keys import api_key_create

CHUNK = 1024
IMPORT_TASK = "datasets.import_run"


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def small_chunks(settings, tmp_path):
    """1 KiB chunks, so a few kilobytes make an upload of several chunks; and a media folder
    of the test's own, since tests here compare what is stored before and after: on SQLite a
    rolled-back test's ids are handed out again, so the next test's upload 1 would otherwise
    find (and clean up) the folder of the last test's upload 1."""
    settings.DATASET_UPLOAD_CHUNK_BYTES = CHUNK
    default = settings.STORAGES["default"]
    options = default.get("OPTIONS", {}) | {"location": str(tmp_path / "media")}
    settings.STORAGES = settings.STORAGES | {"default": default | {"OPTIONS": options}}


@pytest.fixture
def dataset(team):
    return DatasetFactory(workspace=team.workspace, name="Birds DS")


@pytest.fixture
def published():
    """Import tasks really published to the broker during the test: [(task name, args)].

    The messages are removed from the Redis queue afterwards, so no later worker picks them up.
    """
    sent: list[tuple[str, list]] = []

    def receiver(sender=None, headers=None, body=None, **kwargs):
        sent.append((headers["task"], list(body[0])))

    after_task_publish.connect(receiver, weak=False)
    yield sent
    after_task_publish.disconnect(receiver)
    _take_from_queue({args[0] for task, args in sent if task == IMPORT_TASK})


def _take_from_queue(import_ids: set[int]) -> int:
    if not import_ids:
        return 0
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    taken = 0
    for raw in broker.lrange("default", 0, -1):
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0]
        if message["headers"]["task"] == IMPORT_TASK and args and args[0] in import_ids:
            taken += broker.lrem("default", 1, raw)
    return taken


def create(client, dataset, files, ws="acme"):
    return client.post(
        reverse("upload_create", kwargs={"ws_slug": ws, "pk": dataset.pk}),
        json.dumps({"files": files}),
        content_type="application/json",
    )


def chunk_url(imp_id: int, file_index: int, chunk_index: int) -> str:
    return reverse(
        "upload_chunk",
        kwargs={
            "ws_slug": "acme",
            "import_pk": imp_id,
            "file_index": file_index,
            "chunk_index": chunk_index,
        },
    )


def put(client, imp_id, file_index, chunk_index, data: bytes):
    return client.put(
        chunk_url(imp_id, file_index, chunk_index), data, content_type="application/octet-stream"
    )


def complete(client, imp_id):
    return client.post(reverse("upload_complete", kwargs={"ws_slug": "acme", "import_pk": imp_id}))


def status(client, imp_id):
    return client.get(reverse("upload_status", kwargs={"ws_slug": "acme", "import_pk": imp_id}))


def pieces(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def stored_bytes(imp: Import, file_index: int) -> bytes:
    chunks = UploadChunk.objects.filter(upload=imp, file_index=file_index).order_by("chunk_index")
    return b"".join(default_storage.open(c.storage_key).read() for c in chunks)


def noise_png(size=48, seed=1) -> bytes:
    rnd = random.Random(seed)  # noqa: S311 - pixels, not secrets
    img = PILImage.new("RGB", (size, size))
    img.putdata(
        [(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)) for _ in range(size**2)]
    )
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def stored_upload_files() -> set[str]:
    root = Path(default_storage.path("uploads"))
    return {p.as_posix() for p in root.rglob("*")} if root.exists() else set()


def upload_folder(imp: Import) -> Path:
    return Path(default_storage.path(imp.upload_prefix))


@pytest.fixture
def editor(client, team):
    client.force_login(team.editor)
    return client


# --- the resumable upload ---------------------------------------------------------------------


@pytest.mark.django_db
def test_chunks_out_of_order_and_resent_then_complete_queues_the_import(
    editor, dataset, published, django_capture_on_commit_callbacks
):
    image, label = noise_png(), b"0 0.5 0.5 0.2 0.2\n"
    assert len(image) > 3 * CHUNK
    files = [{"name": "bird.png", "size": len(image)}, {"name": "bird.txt", "size": len(label)}]

    response = create(editor, dataset, files)
    assert response.status_code == 201, response.content
    up = response.json()
    assert up["status"] == "uploading" and up["resumed"] is False
    assert up["chunk_size"] == CHUNK
    image_chunks = pieces(image)
    assert up["missing"] == [[0, i] for i in range(len(image_chunks))] + [[1, 0]]
    imp = Import.objects.get(pk=up["id"])
    assert imp.dataset == dataset and imp.created_by.email == "editor@acme.test"
    assert imp.filename == "2 files" and imp.total_size == len(image) + len(label)
    assert imp.chunk_count == len(image_chunks) + 1

    # Last chunk first, the label file in between, and one chunk sent twice.
    order = [(0, i) for i in reversed(range(len(image_chunks)))]
    order.insert(2, (1, 0))
    for file_index, chunk_index in order:
        data = image_chunks[chunk_index] if file_index == 0 else label
        response = put(editor, imp.pk, file_index, chunk_index, data)
        assert response.status_code == 200, response.content
        assert response.json()["stored"] is True
    again = put(editor, imp.pk, 0, 1, image_chunks[1])
    assert again.status_code == 200 and again.json()["stored"] is False
    imp.refresh_from_db()
    assert imp.received_size == imp.total_size
    assert UploadChunk.objects.filter(upload=imp).count() == len(image_chunks) + 1
    assert status(editor, imp.pk).json()["missing"] == []
    assert stored_bytes(imp, 0) == image and stored_bytes(imp, 1) == label

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = complete(editor, imp.pk)
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "queued"
    assert response.json()["import_url"] == f"/w/acme/imports/{imp.pk}/"
    imp.refresh_from_db()
    assert imp.status == ImportStatus.QUEUED
    assert len(callbacks) == 1
    assert published == [(IMPORT_TASK, [imp.pk])]

    # Completing again (a lost response, retried) queues nothing more.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert complete(editor, imp.pk).json()["status"] == "queued"
    assert callbacks == [] and len(published) == 1


@pytest.mark.django_db
def test_a_reloaded_page_resumes_the_same_upload_and_sends_only_missing_chunks(
    editor, client, dataset, team
):
    data = os.urandom(3 * CHUNK + 10)
    files = [{"name": "big.zip", "size": len(data)}]
    first = create(editor, dataset, files).json()
    parts = pieces(data)
    put(editor, first["id"], 0, 0, parts[0])
    put(editor, first["id"], 0, 2, parts[2])

    # Same person, same files (name and size): the same upload, with what is still missing.
    again = create(editor, dataset, files)
    assert again.status_code == 200
    body = again.json()
    assert body["id"] == first["id"] and body["resumed"] is True
    assert body["missing"] == [[0, 1], [0, 3]]
    assert body["received_size"] == 2 * CHUNK
    assert status(editor, first["id"]).json()["missing"] == [[0, 1], [0, 3]]

    # A different size is a different upload; so is someone else's upload of the same files.
    other = create(editor, dataset, [{"name": "big.zip", "size": len(data) + 1}]).json()
    assert other["id"] != first["id"] and other["resumed"] is False
    client.force_login(team.owner)
    owners = create(client, dataset, files).json()
    assert owners["id"] != first["id"]
    client.force_login(team.editor)

    put(editor, first["id"], 0, 1, parts[1])
    put(editor, first["id"], 0, 3, parts[3])
    assert complete(editor, first["id"]).status_code == 200
    assert stored_bytes(Import.objects.get(pk=first["id"]), 0) == data

    # Once queued, the same files start a new upload instead.
    fresh = create(editor, dataset, files).json()
    assert fresh["id"] != first["id"] and fresh["resumed"] is False


@pytest.mark.django_db
def test_complete_with_missing_chunks_says_which_and_queues_nothing(
    editor, dataset, published, django_capture_on_commit_callbacks
):
    data = os.urandom(2 * CHUNK + 1)
    files = [{"name": "a.jpg", "size": len(data)}, {"name": "b.txt", "size": 5}]
    up = create(editor, dataset, files).json()
    put(editor, up["id"], 0, 1, pieces(data)[1])

    with django_capture_on_commit_callbacks(execute=True):
        response = complete(editor, up["id"])
    assert response.status_code == 400
    body = response.json()
    assert body["missing"] == [[0, 0], [0, 2], [1, 0]]
    assert "3 chunks still missing" in body["detail"]
    assert "“a.jpg” chunk 0" in body["detail"] and "“b.txt” chunk 0" in body["detail"]
    assert Import.objects.get(pk=up["id"]).status == ImportStatus.UPLOADING
    assert published == []


@pytest.mark.django_db
def test_chunks_out_of_range_or_of_the_wrong_size_are_refused_and_nothing_is_written(
    editor, dataset
):
    data = os.urandom(CHUNK + 100)
    up = create(editor, dataset, [{"name": "a.jpg", "size": len(data)}]).json()
    imp = Import.objects.get(pk=up["id"])

    cases = [
        (1, 0, data[:CHUNK], "there is no file number 1"),
        (0, 2, data[:100], "there is no chunk number 2"),
        (0, 0, data[: CHUNK - 1], "should be 1,024 bytes; 1,023 arrived"),
        (0, 1, data[CHUNK:] + b"x", "should be 100 bytes; 101 arrived"),
        (0, 1, b"", "should be 100 bytes; 0 arrived"),
        (0, 0, data[:CHUNK] + b"more", "at most 1,024 bytes"),
    ]
    for file_index, chunk_index, body, message in cases:
        response = put(editor, imp.pk, file_index, chunk_index, body)
        assert response.status_code == 400, (file_index, chunk_index)
        assert message in response.json()["detail"]
    imp.refresh_from_db()
    assert imp.received_size == 0
    assert not UploadChunk.objects.filter(upload=imp).exists()
    assert not upload_folder(imp).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("final", ["queued", "running", "succeeded", "failed"])
def test_a_chunk_for_an_upload_that_is_queued_or_finished_is_409(editor, dataset, final):
    data = os.urandom(CHUNK + 1)
    up = create(editor, dataset, [{"name": "a.jpg", "size": len(data)}]).json()
    put(editor, up["id"], 0, 0, data[:CHUNK])
    Import.objects.filter(pk=up["id"]).update(status=final)

    response = put(editor, up["id"], 0, 1, data[CHUNK:])
    assert response.status_code == 409
    assert "takes no more data" in response.json()["detail"]
    assert UploadChunk.objects.filter(upload_id=up["id"]).count() == 1


# --- what an upload may declare ---------------------------------------------------------------


@pytest.mark.django_db
def test_an_upload_larger_than_the_plan_allows_is_refused_before_any_byte(editor, dataset, team):
    plan = team.workspace.plan
    plan.max_upload_bytes = 5000
    plan.save()
    response = create(
        editor, dataset, [{"name": "a.zip", "size": 3000}, {"name": "b.zip", "size": 2001}]
    )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "4.9\xa0KB" in detail and f"the {plan.name} plan allows 4.9\xa0KB" in detail, detail
    assert not Import.objects.exists()
    # Exactly at the limit is fine.
    assert create(editor, dataset, [{"name": "a.zip", "size": 5000}]).status_code == 201


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("files", "message"),
    [
        ([], "Choose at least one file"),
        ("nope", "Choose at least one file"),
        ([{"name": f"{i}.jpg", "size": 1} for i in range(10_001)], "at most 10,000 files"),
        ([{"name": "a\x00.jpg", "size": 3}], "contains a NUL character"),
        ([{"name": "", "size": 3}], "has no name"),
        ([{"name": "a.jpg"}], "has no valid size"),
        ([{"name": "a.jpg", "size": -1}], "has no valid size"),
        ([{"name": "a.jpg", "size": "12"}], "has no valid size"),
        ([{"name": "a.jpg", "size": True}], "has no valid size"),
        ([{"name": "a.jpg", "size": 1}, {"name": "a.jpg", "size": 2}], "is listed twice"),
        ([{"name": "x" * 1025, "size": 1}], "at most 1,024 are accepted"),
        ([{"name": "a.txt", "size": 0}], "The file is empty"),
        (["a.jpg"], "is not described as"),
    ],
)
def test_bad_file_lists_are_refused_with_a_clear_message(editor, dataset, files, message):
    response = create(editor, dataset, files)
    assert response.status_code == 400
    assert message in response.json()["detail"]
    assert not Import.objects.exists()


@pytest.mark.django_db
def test_a_body_that_is_not_a_file_list_is_refused(editor, dataset):
    url = reverse("upload_create", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    response = editor.post(url, "{not json", content_type="application/json")
    assert response.status_code == 400 and "Send the file list as JSON" in response.json()["detail"]
    response = editor.post(url, {"name": ["a.jpg", "b.jpg"], "size": ["3"]})
    assert response.status_code == 400 and "one size for every name" in response.json()["detail"]
    assert not Import.objects.exists()


ODD_NAMES = [
    "\u202egnp.exe",  # right-to-left override: would read "exe.png"
    "\u200fשלום\u200e.jpg",  # RTL and LTR marks
    "é" * 150,  # 300 bytes of UTF-8
    "<script>alert(1)</script>.jpg",
    "../../etc/passwd",
    "<img src=x onerror=alert(2)>",
]


@pytest.mark.django_db
def test_odd_file_names_are_kept_as_given_shown_escaped_and_never_a_storage_path(editor, dataset):
    assert len(ODD_NAMES[2].encode()) == 300
    files = [{"name": name, "size": 3} for name in ODD_NAMES]
    up = create(editor, dataset, files).json()
    for index in range(len(files)):
        assert put(editor, up["id"], index, 0, b"abc").status_code == 200
    assert complete(editor, up["id"]).status_code == 200
    imp = Import.objects.get(pk=up["id"])
    assert imp.files == files

    stored = sorted(
        p.relative_to(upload_folder(imp)).as_posix()
        for p in upload_folder(imp).rglob("*")
        if p.is_file()
    )
    assert stored == [f"{i}/0" for i in range(len(files))]
    assert not Path(default_storage.path("etc")).exists()

    page = editor.get(reverse("import_detail", kwargs={"ws_slug": "acme", "import_pk": imp.pk}))
    html = page.content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.jpg" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<script>alert" not in html and "<img src=x" not in html
    assert f'<bdi class="filename">{ODD_NAMES[0]}</bdi>' in html
    assert ODD_NAMES[2] in html

    # One file: its name is the upload's name, escaped on the dataset page too.
    single = create(editor, dataset, [{"name": ODD_NAMES[3], "size": 3}]).json()
    assert Import.objects.get(pk=single["id"]).filename == ODD_NAMES[3]
    page = editor.get(reverse("dataset_detail", kwargs={"ws_slug": "acme", "pk": dataset.pk}))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.jpg" in page.content.decode()
    assert b"<script>alert" not in page.content


@pytest.mark.django_db
def test_long_single_names_are_cut_for_the_title_only(editor, dataset):
    name = "ü" * 300 + ".zip"
    up = create(editor, dataset, [{"name": name, "size": 3}]).json()
    imp = Import.objects.get(pk=up["id"])
    assert imp.filename == name[:255]
    assert imp.files[0]["name"] == name


# --- the plain form ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_plain_form_uploads_one_file_in_one_request_and_shows_the_import(
    editor, dataset, published, django_capture_on_commit_callbacks
):
    data = noise_png(seed=3)
    url = reverse("upload_page", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    page = editor.get(url)
    assert page.status_code == 200
    assert b'enctype="multipart/form-data"' in page.content
    assert f'action="{url}"'.encode() in page.content

    with django_capture_on_commit_callbacks(execute=True):
        response = editor.post(url, {"file": SimpleUploadedFile("robin.png", data)})
    imp = Import.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse(
        "import_detail", kwargs={"ws_slug": "acme", "import_pk": imp.pk}
    )
    assert imp.status == ImportStatus.QUEUED and imp.filename == "robin.png"
    assert imp.files == [{"name": "robin.png", "size": len(data)}]
    assert UploadChunk.objects.filter(upload=imp).count() == math.ceil(len(data) / CHUNK) > 1
    assert stored_bytes(imp, 0) == data
    assert published == [(IMPORT_TASK, [imp.pk])]

    page = editor.get(response["Location"])
    assert page.status_code == 200
    assert "Uploaded. The import starts in a moment." in page.content.decode()
    assert b'hx-trigger="every 1s"' in page.content


@pytest.mark.django_db
def test_plain_form_errors_leave_nothing_behind(editor, dataset, team):
    url = reverse("upload_page", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    response = editor.post(url, {})
    assert response.status_code == 200 and "This field is required." in response.content.decode()

    response = editor.post(url, {"file": SimpleUploadedFile("empty.zip", b"")})
    assert "The file is empty" in response.content.decode()

    team.workspace.plan.max_upload_bytes = 2 * CHUNK
    team.workspace.plan.save()
    response = editor.post(url, {"file": SimpleUploadedFile("big.zip", os.urandom(2 * CHUNK + 1))})
    assert response.status_code == 200
    assert "allows 2.0\xa0KB in one upload" in response.content.decode()
    assert not Import.objects.exists() and not UploadChunk.objects.exists()


@pytest.mark.django_db
def test_a_whole_file_that_fails_half_way_leaves_no_rows_and_no_bytes(team, dataset):
    """A stream longer than it claimed fails after two chunks were stored: all of it goes."""
    before = stored_upload_files()
    with pytest.raises(ServiceError, match="larger than it said"):
        upload_store_whole(
            access=team.access("editor"),
            dataset=dataset,
            name="liar.zip",
            stream=io.BytesIO(os.urandom(3 * CHUNK)),
            size=2 * CHUNK,
        )
    assert not Import.objects.exists() and not UploadChunk.objects.exists()
    assert stored_upload_files() == before


# --- the API ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_upload_then_follow_the_import(
    client, dataset, team, published, django_capture_on_commit_callbacks
):
    _, write_key = api_key_create(access=team.access("owner"), name="w", scopes=["write"])
    _, read_key = api_key_create(access=team.access("owner"), name="r", scopes=["read"])
    data = os.urandom(3 * CHUNK)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            f"/api/v1/datasets/{dataset.pk}/uploads",
            {"file": SimpleUploadedFile("birds.zip", data)},
            headers={"Authorization": f"Bearer {write_key}"},
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "queued"
    imp = Import.objects.get(pk=body["import_id"])
    assert imp.dataset == dataset and stored_bytes(imp, 0) == data
    assert published == [(IMPORT_TASK, [imp.pk])]

    response = client.get(
        f"/api/v1/imports/{imp.pk}", headers={"Authorization": f"Bearer {read_key}"}
    )
    assert response.status_code == 200
    got = response.json()
    assert got["status"] == "queued" and got["filename"] == "birds.zip"
    assert got["total_size"] == got["received_size"] == len(data)
    assert set(got["progress"]) == {"phase", "done", "total"}
    assert got["report"] == {} and got["error"] == ""

    Import.objects.filter(pk=imp.pk).update(
        status=ImportStatus.FAILED, error="The archive is damaged."
    )
    got = client.get(
        f"/api/v1/imports/{imp.pk}", headers={"Authorization": f"Bearer {read_key}"}
    ).json()
    assert got["status"] == "failed" and got["error"] == "The archive is damaged."


@pytest.mark.django_db
def test_api_refuses_bad_uploads_clearly(client, dataset, team, stranger):
    _, key = api_key_create(access=team.access("owner"), name="w", scopes=["write"])
    auth = {"Authorization": f"Bearer {key}"}
    url = f"/api/v1/datasets/{dataset.pk}/uploads"
    response = client.post(url, headers=auth)
    assert (
        response.status_code == 400 and "multipart form field `file`" in response.json()["detail"]
    )
    team.workspace.plan.max_upload_bytes = 10
    team.workspace.plan.save()
    response = client.post(url, {"file": SimpleUploadedFile("a.zip", b"x" * 11)}, headers=auth)
    assert response.status_code == 400 and "allows 10\xa0bytes" in response.json()["detail"]
    assert not Import.objects.exists()

    client.force_login(team.viewer)
    response = client.post(url, {"file": SimpleUploadedFile("a.zip", b"x")})
    assert response.status_code == 403
    client.force_login(stranger)
    assert client.post(url, {"file": SimpleUploadedFile("a.zip", b"x")}).status_code == 404
    assert client.get("/api/v1/imports/999999").status_code == 404
    assert not Import.objects.exists()


# --- who may do what --------------------------------------------------------------------------


@pytest.mark.django_db
def test_viewers_and_strangers_cannot_touch_an_upload(client, editor, dataset, team, stranger):
    up = create(editor, dataset, [{"name": "a.jpg", "size": 3}]).json()
    for user, expected in ((team.viewer, 403), (stranger, 404)):
        client.force_login(user)
        assert create(client, dataset, [{"name": "b.jpg", "size": 3}]).status_code == expected
        assert put(client, up["id"], 0, 0, b"abc").status_code == expected
        assert status(client, up["id"]).status_code == expected
        assert complete(client, up["id"]).status_code == expected
        page = reverse("upload_page", kwargs={"ws_slug": "acme", "pk": dataset.pk})
        assert client.get(page).status_code == expected
    assert Import.objects.count() == 1
    assert not UploadChunk.objects.exists()
    assert Import.objects.get().status == ImportStatus.UPLOADING


@pytest.mark.django_db
def test_dataset_page_offers_add_images_to_editors_and_lists_imports(client, team, dataset):
    url = reverse("dataset_detail", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    upload_url = reverse("upload_page", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    client.force_login(team.editor)
    page = client.get(url).content.decode()
    assert f'href="{upload_url}"' in page and "Add images" in page
    assert "Nothing uploaded yet." in page

    Import.objects.create(
        dataset=dataset,
        filename="coco8.zip",
        total_size=10,
        status=ImportStatus.SUCCEEDED,
        report={"images_imported": 8, "labels_imported": 30},
    )
    Import.objects.create(
        dataset=dataset,
        filename="broken.zip",
        total_size=5,
        status=ImportStatus.FAILED,
        error="The archive is damaged.",
    )
    client.force_login(team.viewer)
    page = client.get(url).content.decode()
    assert upload_url not in page
    assert "coco8.zip" in page and "8 images, 30 labels" in page
    assert "broken.zip" in page and "The archive is damaged." in page


@pytest.mark.django_db
def test_dataset_page_query_count_does_not_grow_with_imports(client, team, dataset):
    client.force_login(team.editor)
    url = reverse("dataset_detail", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    Import.objects.create(dataset=dataset, filename="a.zip", total_size=1)
    client.get(url)
    with CaptureQueriesContext(connection) as one:
        client.get(url)
    for i in range(6):
        Import.objects.create(dataset=dataset, filename=f"{i}.zip", total_size=1)
    with CaptureQueriesContext(connection) as many:
        client.get(url)
    assert len(many) == len(one)


# --- the import page --------------------------------------------------------------------------


@pytest.mark.django_db
def test_import_page_polls_while_running_and_shows_the_report_once_done(client, team, dataset):
    imp = Import.objects.create(
        dataset=dataset,
        filename="coco8.zip",
        files=[{"name": "coco8.zip", "size": 10}],
        total_size=10,
        received_size=10,
        status=ImportStatus.RUNNING,
        progress_done=3,
        progress_total=8,
    )
    url = reverse("import_detail", kwargs={"ws_slug": "acme", "import_pk": imp.pk})
    client.force_login(team.viewer)
    html = client.get(url).content.decode()
    assert 'hx-trigger="every 1s"' in html and f'hx-get="{url}"' in html
    assert 'max="8" value="3"' in html and "3 of 8" in html
    assert '<meta http-equiv="refresh" content="5">' in html  # inside <noscript>

    partial = client.get(url, headers={"HX-Request": "true"})
    assert partial.status_code == 200
    assert b"<html" not in partial.content and b'id="import-status"' in partial.content

    report = {
        "format": "yolo",
        "images_imported": 8,
        "labels_imported": 30,
        "labels_per_class": {"person": 12, "items": 3, "<b>bold</b>": 1},
        "splits": {"train": 4, "val": 4},
        "skipped": [
            {"file": "notes.pdf", "reason": "unsupported file"},
            {"file": "<script>x</script>.jpg", "reason": "not an image <i>really</i>"},
        ],
        "skipped_count": 5,
        "duplicates": 1,
    }
    Import.objects.filter(pk=imp.pk).update(
        status=ImportStatus.SUCCEEDED, report=report, finished_at=timezone.now()
    )
    partial = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "hx-trigger" not in partial  # final: polling stops
    assert "Imported" in partial and "Ultralytics YOLO" in partial
    assert "<td>items</td><td>3</td>" in partial  # a class named "items" stays a class
    assert "<td>person</td><td>12</td>" in partial and "&lt;b&gt;bold&lt;/b&gt;" in partial
    assert "<td>train</td><td>4</td>" in partial
    skipped = re.search(r'<ul class="skipped"[^>]*>(.*?)</ul>', partial, re.S).group(1)
    lines = re.findall(r"<li>(.*?)</li>", skipped)
    assert lines == [
        '<bdi class="filename">notes.pdf</bdi> — unsupported file',
        '<bdi class="filename">&lt;script&gt;x&lt;/script&gt;.jpg</bdi> — '
        "not an image &lt;i&gt;really&lt;/i&gt;",
    ]
    assert "and 3 more not listed" in partial

    Import.objects.filter(pk=imp.pk).update(
        status=ImportStatus.FAILED, report={}, error="Bad <zip> archive"
    )
    html = client.get(url).content.decode()
    assert "Import failed" in html and "Bad &lt;zip&gt; archive" in html
    assert "hx-trigger" not in html


@pytest.mark.django_db
def test_an_unfinished_upload_says_how_to_resume(client, team, dataset):
    imp = Import.objects.create(
        dataset=dataset,
        filename="big.zip",
        total_size=4096,
        received_size=1024,
        created_by=team.editor,
    )
    client.force_login(team.editor)
    html = client.get(
        reverse("import_detail", kwargs={"ws_slug": "acme", "import_pk": imp.pk})
    ).content.decode()
    assert "Upload not finished" in html and "select the same files again" in html
    assert "hx-trigger" not in html
    upload_page = client.get(
        reverse("upload_page", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    ).content.decode()
    assert "Unfinished uploads" in upload_page and "big.zip" in upload_page


# --- cleanup ----------------------------------------------------------------------------------


def _uploaded(editor, dataset, name="a.jpg") -> Import:
    data = os.urandom(2 * CHUNK + 5)
    up = create(editor, dataset, [{"name": name, "size": len(data)}]).json()
    for i, part in enumerate(pieces(data)):
        put(editor, up["id"], 0, i, part)
    return Import.objects.get(pk=up["id"])


@pytest.mark.django_db
def test_chunks_are_deleted_once_the_import_is_final_and_not_before(
    editor, dataset, django_capture_on_commit_callbacks
):
    imp = _uploaded(editor, dataset)
    assert len(list(upload_folder(imp).rglob("*"))) == 4  # a folder and three chunks
    with pytest.raises(ServiceError, match="only once its import has finished"):
        upload_chunks_delete(imp=imp)
    assert UploadChunk.objects.filter(upload=imp).count() == 3

    Import.objects.filter(pk=imp.pk).update(status=ImportStatus.SUCCEEDED)
    with django_capture_on_commit_callbacks(execute=True):
        assert upload_chunks_delete(imp=imp) == 3
    assert not UploadChunk.objects.filter(upload=imp).exists()
    assert not upload_folder(imp).exists()


@pytest.mark.django_db
def test_stale_uploads_expire_after_24_hours(editor, dataset, django_capture_on_commit_callbacks):
    old = _uploaded(editor, dataset, "old.jpg")
    fresh = _uploaded(editor, dataset, "fresh.jpg")
    queued = _uploaded(editor, dataset, "queued.jpg")
    Import.objects.filter(pk=queued.pk).update(status=ImportStatus.QUEUED)
    day_ago = timezone.now() - timedelta(hours=24, minutes=1)
    Import.objects.filter(pk__in=[old.pk, queued.pk]).update(created_at=day_ago)

    with django_capture_on_commit_callbacks(execute=True):
        assert uploads_expire_stale() == 1
    old.refresh_from_db()
    assert old.status == ImportStatus.FAILED and old.error == STALE_ERROR
    assert old.finished_at is not None
    assert not upload_folder(old).exists()
    assert Import.objects.get(pk=fresh.pk).status == ImportStatus.UPLOADING
    assert upload_folder(fresh).exists()
    assert Import.objects.get(pk=queued.pk).status == ImportStatus.QUEUED
    # Sending more to the expired upload is refused.
    assert put(editor, old.pk, 0, 0, b"x" * CHUNK).status_code == 409
    with django_capture_on_commit_callbacks(execute=True):
        assert uploads_expire_stale() == 0


# --- in the browser ---------------------------------------------------------------------------

# Records every text the progress line shows, so the test sees 100% even though the page
# moves on to the import page right after it.
WATCH_PROGRESS = """
document.addEventListener("DOMContentLoaded", () => {
  const line = document.getElementById("upload-progress-text");
  if (!line) return;
  new MutationObserver(() => window.kestrelProgress(line.textContent))
    .observe(line, {childList: true, characterData: true, subtree: true});
});
"""


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_browser_uploads_two_images_in_chunks_and_lands_on_the_import_page(
    request, live_server, team, published
):
    # The fixtures of tests/browser/conftest.py, imported above, taken by name.
    make_page = request.getfixturevalue("new_page")
    problems = request.getfixturevalue("browser_problems")
    shoot = request.getfixturevalue("screenshot")
    from django.test import Client

    dataset = DatasetFactory(workspace=team.workspace, name="Garden birds")
    robin, sparrow = noise_png(seed=11), noise_png(seed=12)
    expected_chunks = math.ceil(len(robin) / CHUNK) + math.ceil(len(sparrow) / CHUNK)
    assert expected_chunks >= 10

    session = Client()
    session.force_login(team.editor)
    page = make_page("editor")
    page.context.add_cookies(
        [{"name": "sessionid", "value": session.cookies["sessionid"].value, "url": live_server.url}]
    )
    seen: list[str] = []
    page.expose_function("kestrelProgress", lambda text: seen.append(text))
    page.add_init_script(WATCH_PROGRESS)

    page.goto(f"/w/acme/datasets/{dataset.pk}/")
    with page.expect_navigation(wait_until="load"):
        page.get_by_test_id("add-images").click()
    assert page.url.endswith(f"/w/acme/datasets/{dataset.pk}/upload/")
    assert page.get_by_test_id("uploader").is_visible()  # the script revealed it
    shoot(page, "upload-page")

    page.set_input_files(
        "#pick-files",
        files=[
            {"name": "sparrow.png", "mimeType": "image/png", "buffer": sparrow},
            {"name": "robin.png", "mimeType": "image/png", "buffer": robin},
        ],
    )
    summary = page.locator("#selection-summary").inner_text()
    assert summary.startswith("2 files"), summary
    assert page.locator("#selection-list li").all_inner_texts()[0].startswith("robin.png")
    shoot(page, "files-chosen")

    with page.expect_navigation(url=re.compile(r"/w/acme/imports/\d+/$"), wait_until="load"):
        page.get_by_role("button", name="Upload", exact=True).click()

    percents = [int(m.group(1)) for t in seen if (m := re.match(r"(\d+)%", t))]
    assert percents and percents[-1] == 100, seen
    assert percents == sorted(percents), seen
    assert any(0 < p < 100 for p in percents), seen  # the bar moved through the chunks

    imp = Import.objects.get(dataset=dataset)
    assert page.url.endswith(f"/w/acme/imports/{imp.pk}/")
    assert imp.status == ImportStatus.QUEUED
    assert imp.files == [
        {"name": "robin.png", "size": len(robin)},
        {"name": "sparrow.png", "size": len(sparrow)},
    ]
    assert UploadChunk.objects.filter(upload=imp).count() == expected_chunks
    assert stored_bytes(imp, 0) == robin and stored_bytes(imp, 1) == sparrow
    assert published == [(IMPORT_TASK, [imp.pk])]

    heading = page.get_by_role("heading", level=1).inner_text()
    assert heading == "Import of 2 files", heading
    assert page.get_by_test_id("import-status-heading").inner_text() == "Waiting to import"
    assert page.get_by_test_id("import-progress").is_visible()
    # The status partial polls itself while the import is not final.
    with page.expect_response(lambda r: r.url.endswith(f"/imports/{imp.pk}/")) as poll:
        pass
    assert poll.value.request.headers.get("hx-request") == "true"
    assert "robin.png" in page.get_by_test_id("import-files").inner_text()
    shoot(page, "import-page")

    assert problems.console_errors == []
    assert problems.page_errors == []
    assert problems.failed_requests == []
    assert problems.bad_responses == []
