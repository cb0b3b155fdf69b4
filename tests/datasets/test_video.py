"""Videos in an upload are imported as frames sampled at the rate the uploader picked.

The videos are real, made here with PyAV: frame i has a colour of its own (COLOURS), so a test
can tell from an imported JPEG which frame of the video it is.
"""

import io
import json
import threading
import time
import zipfile
from pathlib import Path

import av
import numpy as np
import pytest
from django.core.files.storage import default_storage
from django.urls import reverse
from PIL import Image as PILImage

from datasets.models import Image, Import, ImportStatus
from datasets.services.archive import Archive, ArchiveError, FolderSource, Limits
from datasets.services.datasets import dataset_create
from datasets.services.formats import SKIP_FILE, SKIP_IMAGE
from datasets.services.ingest import dataset_import_path, import_run
from datasets.services.uploads import upload_store_whole
from datasets.services.video import VideoFrames
from tests.datasets.archives import jpeg_bytes

LEVELS = (0, 50, 100, 150, 200, 250)
COLOURS = [(r, g, b) for b in LEVELS for g in LEVELS for r in LEVELS]  # 216


def make_video(path: Path, codec="mpeg4", *, fps=10, seconds=3.0, size=(64, 48), first=0) -> Path:
    """Frame i shows COLOURS[first + i] (mod 216)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(round(fps * seconds)):
            pixels = np.empty((size[1], size[0], 3), np.uint8)
            pixels[...] = COLOURS[(first + i) % len(COLOURS)]
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def frame_index(jpeg: bytes) -> int:
    """Which frame of a make_video video this JPEG shows (the nearest colour, mod 216)."""
    with PILImage.open(io.BytesIO(jpeg)) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=float)
    mean = pixels.reshape(-1, 3).mean(axis=0)
    distances = [sum((mean - c) ** 2) for c in COLOURS]
    best = int(np.argmin(distances))
    assert distances[best] < 20**2 * 3, f"{mean} is no frame's colour"
    return best


def _import(team, path, *, video_fps=None, dataset=None):
    access = team.access("editor")
    dataset = dataset or dataset_create(access=access, name="Clips", task="detect")
    return dataset, dataset_import_path(
        access=access, dataset=dataset, path=path, video_fps=video_fps
    )


def _frames(dataset) -> dict[str, tuple[str, int]]:
    """Imported filename -> (split, which video frame it shows)."""
    out = {}
    for image in Image.objects.filter(dataset=dataset).select_related("blob"):
        sha = image.blob.sha256
        with default_storage.open(f"blobs/{sha[:2]}/{sha}") as f:
            out[image.filename] = (image.split, frame_index(f.read()))
    return out


def _zip(path: Path, files: dict[str, Path | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data if isinstance(data, bytes) else data.read_bytes())
    return path


@pytest.mark.django_db
def test_videos_in_a_zip_become_a_frame_a_second_named_by_their_time(team, tmp_path):
    mp4 = make_video(tmp_path / "a.mp4", "mpeg4")
    webm = make_video(tmp_path / "b.webm", "libvpx", first=100)  # no frame the same as a.mp4's
    archive = _zip(
        tmp_path / "clips.zip",
        {
            "images/train/street.mp4": mp4,
            "images/val/park.webm": webm,
            "images/train/photo.jpg": jpeg_bytes(color=(1, 2, 3)),
            "__MACOSX/images/train/._street.mp4": b"\x00\x05\x16\x07 resource fork",
        },
    )
    dataset, imp = _import(team, archive)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    frames = _frames(dataset)
    photo = frames.pop("photo.jpg")
    assert photo[0] == "train"
    # 3 s at 10 fps: the frames at 0, 1 and 2 s are frames 0, 10 and 20; the folder's split holds
    assert frames == {
        "street_0.jpg": ("train", 0),
        "street_1000.jpg": ("train", 10),
        "street_2000.jpg": ("train", 20),
        "park_0.jpg": ("val", 100),
        "park_1000.jpg": ("val", 110),
        "park_2000.jpg": ("val", 120),
    }
    assert imp.report["images_imported"] == 7
    assert imp.report["skipped"] == []
    assert imp.video_fps == 1.0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("suffix", "codec"), [(".mkv", "mpeg4"), (".mov", "mpeg4"), (".avi", "mpeg4")]
)
def test_a_video_on_its_own_at_two_frames_a_second(team, tmp_path, suffix, codec):
    video = make_video(tmp_path / f"walk{suffix}", codec)
    dataset, imp = _import(team, video, video_fps=2)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.video_fps == 2.0
    assert _frames(dataset) == {
        f"walk_{ms}.jpg": ("train", ms // 100) for ms in (0, 500, 1000, 1500, 2000, 2500)
    }


@pytest.mark.django_db
def test_an_uploaded_video_is_imported_at_the_rate_sent_with_it(team, tmp_path):
    """Through the upload's own source (its chunks in storage), as the web and API send it."""
    video = make_video(tmp_path / "run.mp4", seconds=2.0)
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Clips", task="detect")
    with video.open("rb") as stream:
        imp = upload_store_whole(
            access=access,
            dataset=dataset,
            name="run.mp4",
            stream=stream,
            size=video.stat().st_size,
            video_fps=2.5,
        )
    assert imp.video_fps == 2.5
    imp = import_run(import_id=imp.pk)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert _frames(dataset) == {
        "run_0.jpg": ("train", 0),
        "run_400.jpg": ("train", 4),
        "run_800.jpg": ("train", 8),
        "run_1200.jpg": ("train", 12),
        "run_1600.jpg": ("train", 16),
    }


@pytest.mark.django_db
def test_the_plans_cap_limits_the_frames_and_the_report_says_so(team, tmp_path):
    plan = team.workspace.plan
    plan.max_video_frames = 2
    plan.save(update_fields=["max_video_frames"])
    video = make_video(tmp_path / "long.mp4", seconds=5.0)
    dataset, imp = _import(team, video)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert _frames(dataset) == {"long_0.jpg": ("train", 0), "long_1000.jpg": ("train", 10)}
    [skipped] = imp.report["skipped"]
    assert skipped["file"] == "long.mp4"
    assert skipped["kind"] == SKIP_IMAGE
    assert "3 of its 5 frames" in skipped["reason"]
    assert "at most 2 frames from one video" in skipped["reason"]


@pytest.mark.django_db
def test_a_corrupt_video_and_one_without_pictures_are_listed_while_the_rest_imports(team, tmp_path):
    good = make_video(tmp_path / "good.mp4", seconds=1.0)
    sound = tmp_path / "sound.mkv"
    with av.open(str(sound), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, 800), np.int16), format="s16", layout="mono"
        )
        frame.sample_rate = 8000
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    truncated = make_video(tmp_path / "cut.mp4", seconds=2.0).read_bytes()[:300]
    archive = _zip(
        tmp_path / "mixed.zip",
        {
            "good.mp4": good,
            "sound.mkv": sound,
            "noise.avi": bytes(range(256)) * 40,
            "cut.mp4": truncated,
        },
    )
    dataset, imp = _import(team, archive)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert _frames(dataset) == {"good_0.jpg": ("train", 0)}
    reasons = {s["file"]: (s["reason"], s["kind"]) for s in imp.report["skipped"]}
    assert reasons["sound.mkv"] == ("the file has no video stream", SKIP_FILE)
    assert reasons["noise.avi"][0].startswith("not a video that can be read")
    assert reasons["cut.mp4"][0].startswith("not a video that can be read")
    assert set(reasons) == {"sound.mkv", "noise.avi", "cut.mp4"}
    groups = {g["kind"]: g["count"] for g in imp.report["not_imported"]}
    assert groups[SKIP_FILE] == 3


@pytest.mark.django_db
def test_frames_past_the_decode_time_limit_are_left_out_with_the_reason(team, tmp_path, settings):
    settings.DATASET_VIDEO_MAX_SECONDS = 0
    video = make_video(tmp_path / "slow.mp4")
    dataset, imp = _import(team, video)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert set(_frames(dataset)) == {"slow_0.jpg"}
    reasons = {s["file"]: s["reason"] for s in imp.report["skipped"]}
    assert set(reasons) == {"slow_1000.jpg", "slow_2000.jpg"}
    assert "took more than 0 s to decode (DATASET_VIDEO_MAX_SECONDS)" in reasons["slow_1000.jpg"]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_a_long_video_is_decoded_a_frame_at_a_time_with_memory_flat(tmp_path, settings):
    """60 s at 25 fps of 320×240: its 1,500 decoded frames would take 115 MB as YUV (345 MB as
    RGB); reading its frames at 1 fps and at 0.2 fps (seeking) keeps the process within 40 MB
    of where it started, and every sampled frame is the right one."""
    settings.DATASET_VIDEO_MAX_SECONDS = 300
    make_video(tmp_path / "long.mp4", fps=25, seconds=60, size=(320, 240))
    warm = VideoFrames(FolderSource(tmp_path, only="long.mp4"), fps=0.1)
    list(warm.iter_read([e.name for e in warm.entries][:2]))
    warm.close()
    for fps, seconds_apart in ((1, 1), (0.2, 5)):
        progress = []
        source = VideoFrames(
            FolderSource(tmp_path, only="long.mp4"),
            fps=fps,
            progress=lambda done, total, progress=progress: progress.append((done, total)),
        )
        names = [e.name for e in source.entries]
        assert len(names) == 60 // seconds_apart
        base, peak, stop = _rss(), [0], threading.Event()

        def sample(peak=peak, stop=stop):
            while not stop.is_set():
                peak[0] = max(peak[0], _rss())
                time.sleep(0.002)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.monotonic()
        try:
            got = [(name, frame_index(data)) for name, data in source.iter_read(names)]
        finally:
            stop.set()
            sampler.join()
        seconds = time.monotonic() - started
        source.close()
        assert got == [
            (f"long_{s * 1000}.jpg", (s * 25) % len(COLOURS)) for s in range(0, 60, seconds_apart)
        ]
        grown = max(peak[0], _rss()) - base
        print(
            f"{fps} fps: {len(names)} frames in {seconds:.2f} s "
            f"({source.decode_seconds:.2f} s decoding), RSS grew {grown / 2**20:.1f} MiB"
        )
        assert grown < 40 * 2**20
        assert progress[0] == (0, len(names)) and progress[-1] == (len(names), len(names))
    assert not list(tmp_path.glob("kestrel-video-*"))


@pytest.mark.django_db
def test_the_upload_page_asks_for_frames_per_second_and_the_form_sends_it(client, team, tmp_path):
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Clips", task="detect")
    client.force_login(team.editor)
    url = reverse("upload_page", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    page = client.get(url).content.decode()
    assert "Frames per second from videos" in page
    assert 'name="video_fps"' in page and 'value="1.0"' in page
    assert 'id="uploader_video_fps"' in page  # the resumable uploader's own
    video = make_video(tmp_path / "clip.mp4", seconds=1.0)
    with video.open("rb") as f:
        refused = client.post(url, {"file": f, "video_fps": "45"})
    assert refused.status_code == 200
    assert "less than or equal to 30" in refused.content.decode()
    assert not Import.objects.exists()
    with video.open("rb") as f:
        response = client.post(url, {"file": f, "video_fps": "0.5"})
    assert response.status_code == 302
    assert Import.objects.get().video_fps == 0.5


@pytest.mark.django_db
def test_the_uploader_and_the_api_send_the_rate(client, team, tmp_path):
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Clips", task="detect")
    client.force_login(team.editor)
    create = reverse("upload_create", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    body = {"files": [{"name": "a.mp4", "size": 10}], "video_fps": 3}
    response = client.post(create, body, content_type="application/json")
    assert response.status_code == 201, response.content
    assert Import.objects.get(pk=response.json()["id"]).video_fps == 3.0
    body = {"files": [{"name": "b.mp4", "size": 10}], "video_fps": 0.01}
    response = client.post(create, body, content_type="application/json")
    assert response.status_code == 400
    assert "from 0.1 to 30" in response.json()["detail"]
    video = make_video(tmp_path / "clip.mp4", seconds=1.0)
    with video.open("rb") as f:
        response = client.post(
            f"/api/v1/datasets/{dataset.pk}/uploads", {"file": f, "video_fps": "2"}
        )
    assert response.status_code == 201, response.content
    assert Import.objects.get(pk=response.json()["import_id"]).video_fps == 2.0


@pytest.mark.django_db
def test_manage_py_dataset_import_samples_videos_at_the_rate_given(team, tmp_path):
    from django.core.management import CommandError, call_command

    video = make_video(tmp_path / "cli.mp4", seconds=2.0)
    out = io.StringIO()
    call_command(
        "dataset_import",
        str(video),
        workspace="acme",
        name="From the shell",
        video_fps="2",
        stdout=out,
        stderr=io.StringIO(),
    )
    imp = Import.objects.get(pk=json.loads(out.getvalue())["import"])
    assert imp.video_fps == 2.0
    assert sorted(_frames(imp.dataset)) == [f"cli_{ms}.jpg" for ms in (0, 1000, 1500, 500)]

    with pytest.raises(CommandError, match="must be from"):
        call_command("dataset_import", str(video), workspace="acme", name="X", video_fps="1000")
    with pytest.raises(CommandError, match="must be a number"):
        call_command("dataset_import", str(video), workspace="acme", name="X", video_fps="fast")


@pytest.mark.django_db
def test_a_video_in_an_archive_may_be_larger_than_an_image_may(tmp_path):
    """An image or label file is read into memory and held to max_entry_bytes; a video is
    copied to disk to be decoded, so only the archive's total limit applies to it."""
    video = make_video(tmp_path / "big.mp4", seconds=2.0)
    size = video.stat().st_size
    archive_path = _zip(tmp_path / "big.zip", {"clips/big.mp4": video, "a.jpg": b"\0" * size})
    limits = Limits(max_entry_bytes=size // 2, max_ratio=10**6)
    source = VideoFrames(Archive(archive_path.open("rb"), limits), fps=1)
    try:
        names = sorted(e.name for e in source.entries)
        assert names == ["a.jpg", "clips/big_0.jpg", "clips/big_1000.jpg"]
        assert source.skipped == []
        frames = dict(source.iter_read(["clips/big_0.jpg", "clips/big_1000.jpg"]))
        assert [frame_index(frames[n]) for n in sorted(frames)] == [0, 10]
        with pytest.raises(ArchiveError, match="limit for one file"):
            source.read("a.jpg")  # the image of the same size is still refused
    finally:
        source.close()
