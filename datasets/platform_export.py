"""`data=ul://<workspace>/datasets/<dataset>` for stock `ultralytics` (issue 20).

`GET /api/datasets/<owner>/<dataset>/export[?v=N]` answers `{"downloadUrl", "version"}`: a signed
URL of the dataset's newest saved version (or version N) as an Ultralytics NDJSON file, read
by ultralytics/data/converter.py::convert_ndjson_to_yolo. A dataset with no saved version is
refused (422, saying to save one): training reads versions, so a model can always be traced to
the data it saw, and a run started twice on the same URI trains on the same images.

The NDJSON is made from the version's frozen manifest as it is sent, a block of lines at a
time (a million images never sit in memory): line 1 the dataset (task, class names, the version
and its content hash), then one image a line with its split, annotations and a signed URL of
its bytes. The client names its converted copy after the NDJSON file name and a hash of every
line with the query strings left out: the file name carries the version's number and hash and
an image's URL path its sha256, so the same version is converted once and reused, and a new
version is fetched again. Image paths end in the first 32 hex digits of the sha256, so the
client also links images that another version already fetched (its `.ndjson-assets` pool).

Depth datasets go as Ultralytics' own depth records (converter.py, `_convert_ndjson_to_yolo`):
the dataset line carries `depth_scale`, each image line a `depth: {"url"}` of its 16-bit PNG,
a blob signed and served like the images; an image without a depth map is left out. Semantic
datasets are refused with the way that works: stock Ultralytics' NDJSON has no semantic
record, so the client would train on images without masks; a version's YOLO export (data.yaml
with masks_dir) trains as it is.
"""

import gzip
import io
import json
import math
from collections.abc import Iterator

from django.core.files.storage import default_storage
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from core.files import stored_file_response
from core.signed_urls import signed_query, signed_query_maker, signed_query_valid
from core.streaming import blocks_response
from datasets.models import Blob, Dataset, DatasetVersion, Task
from datasets.services.export import EXTENSIONS, ndjson_annotations
from workspaces.permissions import Perm
from workspaces.platform_api import (
    PlatformRefusal,
    platform_access,
    platform_error,
    platform_matches,
    platform_name_forms,
    platform_require_any,
    platform_slug,
)

NDJSON_PURPOSE = "platform.dataset-ndjson"
IMAGE_PURPOSE = "platform.dataset-image"
NDJSON_SECONDS = 15 * 60  # the client fetches the file at once
# The image URLs must outlive the download of all of them, which starts once the whole NDJSON
# is in: half an hour, and 10 ms more per image (a million images: about three hours).
IMAGE_SECONDS = 30 * 60
IMAGE_SECONDS_PER_IMAGE = 0.01
LINES_PER_BLOCK = 1000
_READ = 1 << 16
_TYPES = {ext: content_type for content_type, ext in EXTENSIONS.items()}
_DECODER = json.JSONDecoder()


def _not_found(owner: str, ident: str) -> str:
    return f"No dataset “{ident}” in workspace “{owner}” that this caller can read."


def platform_dataset_find(*, workspace, ident: str, not_found: str) -> Dataset:
    """The dataset a URI names in `workspace`: its name (any case) or the slug of its name."""
    rows = list(Dataset.objects.for_workspace(workspace).values_list("pk", "name"))
    found = platform_matches(rows, ident, lambda row: platform_name_forms(row[1]))
    if not found:
        raise PlatformRefusal(404, not_found)
    if len(found) > 1:
        names = ", ".join(sorted(name for _, name in found))
        raise PlatformRefusal(
            422, f"“{ident}” names several datasets ({names}): use the exact name of one."
        )
    return Dataset.objects.for_workspace(workspace).get(pk=found[0][0])


def platform_version_pick(*, dataset: Dataset, number: str | None) -> DatasetVersion:
    if dataset.task == Task.SEMANTIC:
        # Stock Ultralytics' NDJSON has no semantic record: its converter would write an empty
        # label file per image and no masks, and the client would train on nothing.
        raise PlatformRefusal(
            422,
            f"Dataset “{dataset.name}” is a semantic segmentation dataset, and stock "
            "Ultralytics' NDJSON (what ul:// downloads) has no place for its masks. Export a "
            "version of it as YOLO in Kestrel (a data.yaml with masks_dir) and train with "
            "data=<folder>/data.yaml.",
        )
    versions = DatasetVersion.objects.filter(dataset=dataset)
    if number is not None:
        if not (number.isdigit() and len(number) < 9):
            raise PlatformRefusal(400, f"v must be a version number, not “{number[:20]}”.")
        version = versions.filter(number=int(number)).first()
        if version is None:
            raise PlatformRefusal(404, f"Dataset “{dataset.name}” has no version {int(number)}.")
    else:
        version = versions.order_by("-number").first()
        if version is None:
            raise PlatformRefusal(
                422,
                f"Dataset “{dataset.name}” has no saved version yet: save one on its Versions "
                "page in Kestrel (training reads a saved version), then run again.",
            )
    if not version.summary.get("images"):
        raise PlatformRefusal(422, f"Version {version.number} of “{dataset.name}” has no images.")
    if dataset.task == Task.DEPTH and not version.summary.get("masks"):
        raise PlatformRefusal(
            422,
            f"Version {version.number} of “{dataset.name}” has no depth maps: add them to its "
            "images and save a version (an image without one has nothing to train on).",
        )
    return version


def _served_images(version: DatasetVersion) -> int:
    """The image lines the NDJSON holds: a depth image without its map is left out (the
    client refuses a depth record without one)."""
    if version.dataset.task == Task.DEPTH:
        return version.summary.get("masks", 0)
    return version.summary.get("images", 0)


def ndjson_filename(version: DatasetVersion) -> str:
    """The client's name for its converted copy: the dataset, version and content."""
    stem = platform_slug(version.dataset.name)[:60] or f"dataset-{version.dataset_id}"
    return f"{stem}-v{version.number}-{version.content_hash[:12]}.ndjson"


def _export_url(request: HttpRequest, version: DatasetVersion) -> str:
    filename = ndjson_filename(version)
    path = reverse("platform_dataset_ndjson", kwargs={"pk": version.pk, "filename": filename})
    query = signed_query(NDJSON_PURPOSE, f"{version.pk}/{filename}", seconds=NDJSON_SECONDS)
    return request.build_absolute_uri(f"{path}?{query}")


@require_GET
def platform_dataset_export(request: HttpRequest, owner: str, slug: str) -> JsonResponse:
    not_found = _not_found(owner, slug)
    try:
        access = platform_access(request, owner=owner, not_found=not_found)
        # A key made to train (the "Train on your own machine" page) pulls what it trains on.
        platform_require_any(access, (Perm.READ, Perm.TRAIN), "download datasets")
        dataset = platform_dataset_find(workspace=access.workspace, ident=slug, not_found=not_found)
        version = platform_version_pick(dataset=dataset, number=request.GET.get("v"))
    except PlatformRefusal as refusal:
        return platform_error(refusal.status, refusal.message)
    return JsonResponse(
        {
            "downloadUrl": _export_url(request, version),
            "version": version.number,
            "contentHash": version.content_hash,
            "images": _served_images(version),
        }
    )


# --- the NDJSON, as it is sent ----------------------------------------------------------------


def _manifest_text(key: str) -> Iterator[str]:
    with default_storage.open(key, "rb") as f, gzip.GzipFile(fileobj=f) as gz:
        text = io.TextIOWrapper(gz, encoding="utf-8")
        while chunk := text.read(_READ):
            yield chunk


def _manifest_tail(key: str) -> dict:
    """The fields the canonical manifest writes after its images (keypoint_shape, task): read
    through to its end, keeping only the last block (datasets/services/versions.py writes the
    keys sorted, `images` in the middle)."""
    tail = ""
    for chunk in _manifest_text(key):
        tail = (tail + chunk)[-2 * _READ :]
    start = tail.rfind('],"keypoint_shape":')
    return json.loads("{" + tail[start + 2 :])


def _manifest_stream(key: str) -> Iterator[dict]:
    """The manifest's head ({"classes", "dataset"}) and then each of its images, parsed a
    block at a time."""
    chunks = _manifest_text(key)
    buffer = ""
    marker = ',"images":['
    while (at := buffer.find(marker)) < 0:
        buffer += next(chunks)
    yield json.loads(buffer[:at] + "}")
    buffer, pos = buffer[at + len(marker) :], 0
    while True:
        while pos < len(buffer) and buffer[pos] in ", ":
            pos += 1
        if pos < len(buffer) and buffer[pos] == "]":
            return
        try:
            image, end = _DECODER.raw_decode(buffer, pos)
        except json.JSONDecodeError:
            more = next(chunks, None)
            if more is None:
                raise ValueError(f"The manifest {key} ends inside its images.") from None
            buffer, pos = buffer[pos:] + more, 0
            continue
        yield image
        pos = end


def _ndjson_blocks(request: HttpRequest, version: DatasetVersion) -> Iterator[bytes]:
    tail = _manifest_tail(version.manifest_key)
    stream = _manifest_stream(version.manifest_key)
    head = next(stream)
    task = tail["task"]
    record = {
        "type": "dataset",
        "task": task,
        "name": head["dataset"],
        "version": version.number,
        "content_hash": version.content_hash,
        # A Kestrel page: the client pools content-addressed images of URLs under its platform.
        "url": request.build_absolute_uri(
            reverse(
                "dataset_detail",
                kwargs={"ws_slug": version.dataset.workspace.slug, "pk": version.dataset_id},
            )
        ),
        "class_names": {str(i): name for i, name in enumerate(head["classes"])},
    }
    if task == Task.POSE and tail.get("keypoint_shape"):
        record["kpt_shape"] = list(tail["keypoint_shape"])
    if task == Task.DEPTH:
        # The PNG value of one metre; the client writes it into its data.yaml.
        record["depth_scale"] = head.get("depth_scale") or 1000
    yield (json.dumps(record) + "\n").encode()

    images = version.summary.get("images", 0)
    seconds = IMAGE_SECONDS + math.ceil(images * IMAGE_SECONDS_PER_IMAGE)
    query = signed_query_maker(IMAGE_PURPOSE, seconds=seconds)
    sample = "0" * 64
    prefix = request.build_absolute_uri(
        reverse("platform_dataset_image", kwargs={"sha256": sample, "filename": "x.jpg"})
    ).removesuffix(f"{sample}/x.jpg")

    def signed(sha: str, filename: str) -> str:
        return f"{prefix}{sha}/{filename}?{query(f'{sha}/{filename}')}"

    def block(batch: list[dict]) -> bytes:
        shas = list({img["sha256"] for img in batch})
        types = dict(Blob.objects.filter(sha256__in=shas).values_list("sha256", "content_type"))
        lines = []
        for img in batch:
            if task == Task.DEPTH and "mask" not in img:
                continue  # nothing to learn from, and the client refuses a record without one
            sha = img["sha256"]
            filename = sha[:32] + EXTENSIONS.get(types.get(sha, ""), ".jpg")
            line = {
                "type": "image",
                "file": filename,
                "url": signed(sha, filename),
                "split": img["split"],
                "width": img["width"],
                "height": img["height"],
                "annotations": {}
                if task == Task.DEPTH
                else ndjson_annotations(task, img["labels"]),
            }
            if task == Task.DEPTH:
                # Ultralytics' depth record: the 16-bit PNG beside the image, a blob served
                # through the same signed, expiring route (its name ends in 32 hex digits of
                # its sha256 too, so the client pools it like an image).
                line["depth"] = {"url": signed(img["mask"], img["mask"][:32] + ".png")}
            lines.append(json.dumps(line))
        return ("\n".join(lines) + "\n").encode() if lines else b""

    batch: list[dict] = []
    for image in stream:
        batch.append(image)
        if len(batch) == LINES_PER_BLOCK:
            yield block(batch)
            batch = []
    if batch:
        yield block(batch)


@require_GET
def platform_dataset_ndjson(request: HttpRequest, pk: int, filename: str) -> HttpResponse:
    """The NDJSON of one version; the signed URL is the only key."""
    if not signed_query_valid(NDJSON_PURPOSE, f"{pk}/{filename}", request.GET):
        return platform_error(403, "This download URL is not valid or has expired.")
    version = DatasetVersion.objects.select_related("dataset__workspace").filter(pk=pk).first()
    if version is None:
        return platform_error(404, "This dataset version no longer exists.")
    response = blocks_response(
        request, _ndjson_blocks(request, version), content_type="application/x-ndjson"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def platform_dataset_image(request: HttpRequest, sha256: str, filename: str) -> HttpResponse:
    """One image (or depth map) of a version's NDJSON, by the sha256 its signed URL names."""
    stem, dot, ext = filename.partition(".")
    content_type = _TYPES.get(f"{dot}{ext}")
    valid = stem == sha256[:32] and content_type is not None
    if not (valid and signed_query_valid(IMAGE_PURPOSE, f"{sha256}/{filename}", request.GET)):
        return platform_error(403, "This image URL is not valid or has expired.")
    try:
        return stored_file_response(
            key=Blob(sha256=sha256).storage_key, filename=filename, inline_type=content_type
        )
    except Http404:
        return platform_error(404, "This image is no longer stored.")
