"""Issue 14, item 3: no stored file is reachable by a public URL.

Every kind of file Kestrel stores is made for real, then fetched at its storage path under
/media/ (with DEBUG on and off: the quick start ran with DEBUG on, and then Django served the
whole media folder to anyone) and through the view that serves it: anonymously, by a stranger
(404) and by a member (200, the file's bytes)."""

import importlib
import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.shortcuts import resolve_url
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, clear_url_caches, get_resolver, reverse

from core.storage import storage_put
from datasets.services.thumbnails import thumbnails_make
from datasets.services.uploads import upload_chunk_put, upload_create
from datasets.services.versions import version_create
from deploy.exports import export_filename
from deploy.models import ExportState, ModelExport
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)
from tests.training.factories import finished_job, local_gpu
from tests.workspaces.factories import ProjectFactory
from training.models import TrainedModel
from training.services.models import model_upload

MEDIA = "/" + settings.MEDIA_URL.lstrip("/")  # where the media folder was served


@dataclass
class Served:
    """A stored file's key, and the routes that serve it with what a member gets back."""

    kind: str
    key: str
    data: bytes
    pages: list[str] = field(default_factory=list)  # session pages (login redirect when anon)
    api: list[str] = field(default_factory=list)  # JSON API routes (401 when anon)
    # What a member's download must be; by default the stored bytes themselves.
    member_gets: Callable[[bytes], bool] | None = None

    def is_right(self, body: bytes) -> bool:
        return self.member_gets(body) if self.member_gets else body == self.data


def _zip_with(data: bytes):
    """A member's download is an archive holding these bytes."""

    def check(body: bytes) -> bool:
        with zipfile.ZipFile(io.BytesIO(body)) as zf:
            return any(zf.read(name) == data for name in zf.namelist())

    return check


def _torch_like_zip(payload: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
    return out.getvalue()


@pytest.fixture
def stored(team, stranger) -> dict[str, Served]:
    """One of every kind of stored file, made by the code that makes it where that is quick."""
    ws = team.workspace.slug
    access = team.access("owner")
    dataset = DatasetFactory(workspace=team.workspace, name="Private birds")
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    image = ImageFactory(dataset=dataset, split="train")
    LabelFactory(image=image, dataset_class=bird)
    LabelFactory(image=ImageFactory(dataset=dataset, split="val"), dataset_class=bird)
    thumbnails_make(blob_ids=[image.blob_id])
    image.blob.refresh_from_db()
    assert image.blob.has_thumbnail
    version = version_create(access=access, dataset=dataset, note="v1")

    chunk = b"PK\x03\x04 first bytes of someone's upload"
    imp, _ = upload_create(
        access=access, dataset=dataset, files=[{"name": "birds.zip", "size": len(chunk)}]
    )
    upload_chunk_put(access=access, imp=imp, file_index=0, chunk_index=0, data=chunk)

    project = ProjectFactory(workspace=team.workspace)
    job = finished_job(project=project, version=version, gpu=local_gpu(), user=team.owner)
    best, results_csv = b"best checkpoint bytes", b"epoch,metrics/mAP50(B)\n1,0.5\n"
    storage_put(job.best_key, best, replace=True)  # ids start again on SQLite: keys too
    results_key = f"training/jobs/{job.pk}/results.csv"
    storage_put(results_key, results_csv, replace=True)
    job.artifacts = {
        **job.artifacts,
        "best.pt (training)": job.best_key,
        "results.csv": results_key,
    }
    # As the supervisor stores a checkpoint: once it passed inspection (issue 31).
    job.inspected_weights = {**job.inspected_weights, "best.pt (training)": job.best_key}
    job.save(update_fields=["artifacts", "inspected_weights"])
    trained = TrainedModel.objects.get(job=job)

    uploaded_bytes = _torch_like_zip(b"someone's own weights")
    uploaded = model_upload(
        access=access,
        project=project,
        name="Uploaded",
        task="detect",
        upload=SimpleUploadedFile("mine.pt", uploaded_bytes),
    )
    # Served only once a worker inspected it (issue 31); its inspection is not what is tested.
    TrainedModel.objects.filter(pk=uploaded.pk).update(inspect_state="ok")
    export = ModelExport.objects.create(
        workspace=team.workspace, model=trained, format="onnx", state=ExportState.SUCCEEDED
    )
    export_bytes = b"onnx export bytes"
    export.file_key = f"exports/{trained.pk}/{export.pk}/{export_filename(export)}"
    storage_put(export.file_key, export_bytes, replace=True)
    export.save(update_fields=["file_key"])

    def job_file(name: str) -> str:
        return reverse("job_artifact", kwargs={"ws_slug": ws, "pk": job.pk, "name": name})

    img = {"ws_slug": ws, "pk": dataset.pk, "image_pk": image.pk}
    ver = {"ws_slug": ws, "pk": dataset.pk}
    return {
        s.kind: s
        for s in [
            Served(
                "image blob",
                image.blob.storage_key,
                _read(image.blob.storage_key),
                pages=[reverse("dataset_image_file", kwargs=img)],
            ),
            Served(
                "thumbnail",
                image.blob.thumbnail_key,
                _read(image.blob.thumbnail_key),
                pages=[reverse("dataset_image_thumb", kwargs=img)],
            ),
            Served("upload chunk", imp.upload_prefix + "0/0", chunk),
            Served(
                "version manifest (and its archives)",
                version.manifest_key,
                _read(version.manifest_key),
                pages=[
                    reverse("version_export", kwargs={**ver, "number": 1, "fmt": "yolo"}),
                    reverse("dataset_export", kwargs={**ver, "fmt": "coco"}),
                ],
                api=[f"/api/v1/datasets/{dataset.pk}/export?version=1"],
                member_gets=_zip_with(_read(image.blob.storage_key)),
            ),
            Served(
                "checkpoint last.pt",
                job.artifacts["last.pt"],  # where it was stored (a key taken already is not)
                _read(job.artifacts["last.pt"]),
                pages=[job_file("last.pt")],
            ),
            Served(
                "checkpoint best.pt", job.best_key, best, pages=[job_file("best.pt (training)")]
            ),
            Served(
                "plot",
                job.artifacts["results.png"],
                _read(job.artifacts["results.png"]),
                pages=[job_file("results.png")],
            ),
            Served("results.csv", results_key, results_csv, pages=[job_file("results.csv")]),
            Served(
                "trained weights",
                trained.weights_key,
                _read(trained.weights_key),
                pages=[reverse("model_weights", kwargs={"ws_slug": ws, "pk": trained.pk})],
                api=[f"/api/v1/models/{trained.pk}/weights"],
            ),
            Served(
                "uploaded model",
                uploaded.weights_key,
                uploaded_bytes,
                pages=[reverse("model_weights", kwargs={"ws_slug": ws, "pk": uploaded.pk})],
                api=[f"/api/v1/models/{uploaded.pk}/weights"],
            ),
            Served(
                "export",
                export.file_key,
                export_bytes,
                pages=[reverse("export_download", kwargs={"ws_slug": ws, "pk": export.pk})],
            ),
        ]
    }


def _read(key: str) -> bytes:
    from django.core.files.storage import default_storage

    with default_storage.open(key, "rb") as f:
        return f.read()


def _body(response) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return response.content


def _callers(team, stranger) -> dict[str, Client]:
    anonymous, outsider = Client(), Client()
    outsider.force_login(stranger)
    return {"anonymous": anonymous, "stranger": outsider}


@pytest.fixture(params=[True, False], ids=["DEBUG-on", "DEBUG-off"])
def urls_built_with_debug(request):
    """config.urls as a process with this DEBUG builds it (the URLconf reads DEBUG once, at
    import), restored afterwards."""
    import config.urls

    before = settings.DEBUG
    with override_settings(DEBUG=request.param):
        importlib.reload(config.urls)
        clear_url_caches()
        yield request.param
    settings.DEBUG = before
    importlib.reload(config.urls)
    clear_url_caches()


def _walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


def test_no_url_serves_the_media_folder(urls_built_with_debug):
    from django.views.static import serve

    served = [route for route, view in _walk(get_resolver().url_patterns) if view is serve]
    assert served == [], f"public media routes with DEBUG={urls_built_with_debug}: {served}"


def test_media_paths_are_404_for_anyone(urls_built_with_debug, stored, team, stranger):
    member = Client()
    member.force_login(team.viewer)
    callers = {**_callers(team, stranger), "member": member}
    leaks = []
    for s in stored.values():
        for who, client in callers.items():
            response = client.get(MEDIA + s.key)
            if response.status_code != 404 or s.data in _body(response):
                leaks.append((s.kind, who, response.status_code))
    assert leaks == []


def test_serving_views_refuse_anonymous_and_strangers(stored, team, stranger):
    callers = _callers(team, stranger)
    leaks = []
    for s in stored.values():
        for url in s.pages + s.api:
            for who, client in callers.items():
                response = client.get(url)
                status = response.status_code
                if who == "stranger":
                    held = status == 404
                elif url in s.api:
                    held = status in (401, 404)
                else:
                    held = status == 404 or (
                        status == 302
                        and response["Location"].startswith(resolve_url(settings.LOGIN_URL))
                    )
                body = _body(response)
                if not held or (s.data and s.data in body):
                    leaks.append((s.kind, url, who, status))
    assert leaks == []


def test_members_get_the_bytes(stored, team):
    member = Client()
    member.force_login(team.viewer)
    for s in stored.values():
        for url in s.pages + s.api:
            response = member.get(url)
            assert response.status_code == 200, (s.kind, url, response.status_code)
            assert s.is_right(_body(response)), (s.kind, url)
            assert response["X-Content-Type-Options"] == "nosniff", (s.kind, url)
            assert response.get("Content-Disposition", "").startswith(("attachment", "inline")), (
                s.kind,
                url,
            )


def test_public_dataset_images_are_readable_by_anyone_and_nothing_else(team, stranger):
    """Explore's rule: a public dataset's images (and thumbnails) are open; its other files
    and a private dataset's images through the same public route are not."""
    public = DatasetFactory(workspace=team.workspace, name="Open birds", is_public=True)
    private = DatasetFactory(workspace=team.workspace, name="Closed birds")
    shown = ImageFactory(dataset=public)
    hidden = ImageFactory(dataset=private)
    thumbnails_make(blob_ids=[shown.blob_id])
    clients = _callers(team, stranger)
    for who, client in clients.items():
        ok = client.get(
            reverse("public_image_file", kwargs={"pk": public.pk, "image_pk": shown.pk})
        )
        assert ok.status_code == 200, who
        assert _body(ok) == _read(shown.blob.storage_key), who
        assert ok["X-Content-Type-Options"] == "nosniff"
        thumb = client.get(
            reverse("public_image_thumb", kwargs={"pk": public.pk, "image_pk": shown.pk})
        )
        assert thumb.status_code == 200, who
        for pk, image_pk in ((private.pk, hidden.pk), (public.pk, hidden.pk)):
            for name in ("public_image_file", "public_image_thumb"):
                url = reverse(name, kwargs={"pk": pk, "image_pk": image_pk})
                assert client.get(url).status_code == 404, (who, name, pk, image_pk)
        # The public dataset's bytes are still not at a storage path.
        assert client.get(MEDIA + shown.blob.storage_key).status_code == 404
        # Nor are its workspace pages open to whoever can see it in Explore.
        page = reverse(
            "dataset_image_file",
            kwargs={"ws_slug": team.workspace.slug, "pk": public.pk, "image_pk": shown.pk},
        )
        assert client.get(page).status_code in (302, 404), who


# --- S3: a short-lived presigned URL, made without a request --------------------------------

DUMMY_S3 = {
    "BACKEND": "storages.backends.s3.S3Storage",
    "OPTIONS": {
        "bucket_name": "kestrel-private",
        # Nothing listens on the discard port: any request would fail the view.
        "endpoint_url": "http://127.0.0.1:9",
        "region_name": "us-east-1",
        "access_key": "AKIATESTTESTTESTTEST",
        "secret_key": "not-a-real-secret",
        "default_acl": None,
        "querystring_auth": True,
        "signature_version": "s3v4",
    },
}


@pytest.mark.parametrize(
    ("kind", "shown_as"),
    [
        ("image blob", "image/png"),
        ("plot", "image/png"),
        ("checkpoint last.pt", None),
        ("trained weights", None),
        ("export", None),
    ],
)
def test_on_s3_members_are_redirected_to_a_presigned_url_that_expires_soon(
    stored, team, stranger, kind, shown_as
):
    from django.core.files.storage import default_storage

    s = stored[kind]
    member = Client()
    member.force_login(team.viewer)
    with override_settings(STORAGES={**settings.STORAGES, "default": DUMMY_S3}):
        sent = []
        events = default_storage.connection.meta.client.meta.events
        events.register("before-send.s3", lambda request, **kw: sent.append(request.url))
        for url in s.pages + s.api:
            response = member.get(url)
            assert response.status_code == 302, (kind, url, response.status_code)
            target = urlsplit(response["Location"])
            query = parse_qs(target.query)
            assert unquote(target.path) == f"/kestrel-private/{s.key}", target.path
            # The storage's own default is an hour; the view asks for the setting's few minutes.
            assert query["X-Amz-Expires"] == [str(settings.STORAGE_URL_EXPIRE_SECONDS)]
            assert settings.STORAGE_URL_EXPIRE_SECONDS <= 300
            assert "X-Amz-Signature" in query
            disposition = query["response-content-disposition"][0]
            if shown_as:
                assert disposition.startswith("inline"), disposition
                assert query["response-content-type"] == [shown_as]
            else:
                assert disposition.startswith("attachment"), disposition
                assert query["response-content-type"] == ["application/octet-stream"]
            # Kept no longer than the signature lives, so a browser never reuses a dead URL.
            cache = response["Cache-Control"]
            assert cache == "no-store" or int(cache.rsplit("=", 1)[1]) < int(
                query["X-Amz-Expires"][0]
            ), cache
            assert "ETag" not in response
            for who, client in _callers(team, stranger).items():
                refused = client.get(url)
                assert refused.status_code in (302, 401, 404), (who, url)
                assert "X-Amz-Signature" not in refused.get("Location", ""), (who, url)
        assert sent == [], "presigning made a request"


def test_the_s3_settings_keep_objects_private():
    """With a bucket named, the settings' S3 storage writes no ACL (objects stay as private as
    the bucket) and signs every URL it makes for a few minutes only."""
    code = (
        "import json, config.settings as s; "
        "print(json.dumps([s.STORAGES['default'], s.STORAGE_URL_EXPIRE_SECONDS]))"
    )
    env = {
        **os.environ,
        "AWS_STORAGE_BUCKET_NAME": "kestrel",
        "DJANGO_ENV": "development",
        "SECRET_KEY": "only-for-this-subprocess-" + "x" * 40,  # nothing written into var/
    }
    out = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    storage, expire = json.loads(out)
    assert storage["BACKEND"] == "storages.backends.s3.S3Storage"
    assert storage["OPTIONS"]["default_acl"] is None
    assert storage["OPTIONS"]["querystring_auth"] is True
    assert storage["OPTIONS"]["querystring_expire"] == expire <= 300


# --- local storage behind a front server ------------------------------------------------------


def test_with_an_internal_location_the_front_server_sends_the_bytes(stored, team, stranger):
    s = stored["checkpoint last.pt"]
    member = Client()
    member.force_login(team.viewer)
    with override_settings(STORAGE_ACCEL_REDIRECT="/_protected/"):
        response = member.get(s.pages[0])
        assert response.status_code == 200
        assert response["X-Accel-Redirect"] == "/_protected/" + s.key
        assert _body(response) == b""
        assert response["Content-Disposition"].startswith("attachment")
        assert response["X-Content-Type-Options"] == "nosniff"
        for who, client in _callers(team, stranger).items():
            refused = client.get(s.pages[0])
            assert "X-Accel-Redirect" not in refused, who


def test_a_stored_svg_or_html_never_renders_inline(stored, team):
    """A job file whose name says SVG or HTML (a trainer controls the names it reports) is a
    download of opaque bytes, never a page of Kestrel's origin."""
    from training.models import TrainingJob

    job_key = stored["checkpoint last.pt"].key
    job = TrainingJob.objects.get(pk=int(job_key.split("/")[2]))
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
    for name in ("plot.svg", "report.html"):
        key = f"training/jobs/{job.pk}/plots/{name}"
        storage_put(key, svg, replace=True)
        job.artifacts = {**job.artifacts, name: key}
    job.save(update_fields=["artifacts"])
    member = Client()
    member.force_login(team.viewer)
    for name in ("plot.svg", "report.html"):
        url = reverse(
            "job_artifact", kwargs={"ws_slug": team.workspace.slug, "pk": job.pk, "name": name}
        )
        response = member.get(url)
        assert response.status_code == 200
        assert response["Content-Type"] == "application/octet-stream", name
        assert response["Content-Disposition"].startswith("attachment"), name
        assert response["X-Content-Type-Options"] == "nosniff"
