"""Ingest speed: a zip of N generated 640x480 JPEGs with YOLO labels, imported for real.

Prints rows committed per second (the import makes each image's thumbnail as it checks it), the
thumbnails left for the worker and the time they take, peak memory of the import,
and the ratio to a bare loop that only hashes each file and reads its image header.

    .venv/bin/python bench/ingest.py [--images 10000]

With --formats, the same images and boxes (3 a image: --images 33334 is 100,002 labels) are
written as an Ultralytics YOLO, a COCO, a CVAT for images 1.1 XML and a Label Studio JSON
export, and each is imported in a process of its own from a clean database, twice; the rows
print the better parse time alone (recognising the format and reading its labels) and the better
whole import.

Runs against the database in DATABASE_URL (default: the quick-start SQLite; use PostgreSQL for
figures that mean something: DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench).
"""

import argparse
import concurrent.futures
import hashlib
import io
import os
import random
import resource
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def make_zip(path: Path, n: int) -> None:
    from PIL import Image, ImageDraw

    rng = random.Random(0)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("data.yaml", "train: images/train\nval: images/val\nnames: [circle, square]\n")
        for i in range(n):
            img = Image.new("RGB", (640, 480), (rng.randrange(256), rng.randrange(256), 90))
            draw = ImageDraw.Draw(img)
            lines = []
            for _ in range(3):
                w, h = rng.randint(20, 200), rng.randint(20, 200)
                x, y = rng.randint(0, 640 - w), rng.randint(0, 480 - h)
                cls = rng.randrange(2)
                colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
                (draw.ellipse if cls == 0 else draw.rectangle)([x, y, x + w, y + h], fill=colour)
                lines.append(
                    f"{cls} {(x + w / 2) / 640:.6f} {(y + h / 2) / 480:.6f} {w / 640:.6f} {h / 480:.6f}"
                )
            out = io.BytesIO()
            img.save(out, format="JPEG", quality=85)
            split = "val" if i % 10 == 0 else "train"
            zf.writestr(f"images/{split}/{i:06d}.jpg", out.getvalue())
            zf.writestr(f"labels/{split}/{i:06d}.txt", "\n".join(lines) + "\n")


def bare_loop(path: Path) -> float:
    """The floor: read each entry, hash it, read its image header. No checks, no writes."""
    from PIL import Image

    start = time.perf_counter()
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if info.filename.endswith(".jpg"):
                data = zf.read(info)
                hashlib.sha256(data).hexdigest()
                with Image.open(io.BytesIO(data)) as img:
                    img.size  # noqa: B018
    return time.perf_counter() - start


def _earlier_runs_deleted(user_id: int) -> None:
    from django.db import connection

    from datasets.models import Blob, Dataset

    Dataset.objects.filter(workspace__memberships__user_id=user_id).delete()
    Blob.objects.filter(images__isnull=True).delete()
    connection.close()


def _bench_team(name: str):
    """Django set up on a media folder of its own, migrated, and a team of the bench's user."""
    os.environ["MEDIA_ROOT"] = tempfile.mkdtemp(prefix="kestrel-bench-media-")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from billing.plans import plans_seed
    from workspaces.models import User
    from workspaces.selectors import workspace_access_for_user
    from workspaces.services.workspaces import workspace_create_team

    plans_seed()
    user, _ = User.objects.get_or_create(email="bench@example.com")
    team = workspace_create_team(user=user, name=f"{name} {time.time():.0f}")
    return user, workspace_access_for_user(user=user, slug=team.slug)


FORMAT_ROWS = ("yolo", "coco", "cvat", "label-studio")
SMALL = (96, 72)  # small images: the labels, not the pixels, are what these rows compare


def make_format_zips(cache: Path, n: int) -> dict[str, Path]:
    """One set of n small images with 3 boxes each, written in every FORMAT_ROWS layout."""
    import json

    from PIL import Image

    paths = {fmt: cache / f"formats-{fmt}-{n}.zip" for fmt in FORMAT_ROWS}
    if all(p.exists() for p in paths.values()):
        return paths
    rng = random.Random(1)
    w, h = SMALL
    images, boxes = [], []
    for i in range(n):
        img = Image.new("RGB", SMALL, (i % 256, (i // 256) % 256, (i // 65536) % 256))
        out = io.BytesIO()
        img.save(out, format="JPEG", quality=80)
        images.append((f"{i:06d}.jpg", out.getvalue()))
        own = []
        for _ in range(3):
            bw, bh = rng.randint(5, 40), rng.randint(5, 30)
            own.append((rng.randrange(2), rng.randint(0, w - bw), rng.randint(0, h - bh), bw, bh))
        boxes.append(own)
    names = ["circle", "square"]
    zips = {fmt: zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) for fmt, p in paths.items()}
    for name, data in images:
        zips["yolo"].writestr(f"images/train/{name}", data)
        zips["coco"].writestr(f"images/train/{name}", data)
        zips["cvat"].writestr(f"images/{name}", data)
        zips["label-studio"].writestr(f"images/{name}", data)
    zips["yolo"].writestr("data.yaml", "train: images/train\nnames: [circle, square]\n")
    for (name, _), own in zip(images, boxes, strict=True):
        lines = [
            f"{c} {(x + bw / 2) / w:.6f} {(y + bh / 2) / h:.6f} {bw / w:.6f} {bh / h:.6f}"
            for c, x, y, bw, bh in own
        ]
        zips["yolo"].writestr(f"labels/train/{name[:-4]}.txt", "\n".join(lines) + "\n")
    coco = {
        "images": [
            {"id": i, "file_name": name, "width": w, "height": h}
            for i, (name, _) in enumerate(images)
        ],
        "annotations": [
            {"id": i * 3 + j, "image_id": i, "category_id": c, "bbox": [x, y, bw, bh],
             "area": bw * bh, "iscrowd": 0}
            for i, own in enumerate(boxes)
            for j, (c, x, y, bw, bh) in enumerate(own)
        ],
        "categories": [{"id": i, "name": n} for i, n in enumerate(names)],
    }  # fmt: skip
    zips["coco"].writestr("annotations/instances_train.json", json.dumps(coco))
    xml = ['<?xml version="1.0" encoding="utf-8"?>\n<annotations><version>1.1</version><meta>'
           "<task><labels>" + "".join(f"<label><name>{n}</name></label>" for n in names)
           + "</labels></task></meta>"]  # fmt: skip
    for i, ((name, _), own) in enumerate(zip(images, boxes, strict=True)):
        xml.append(f'<image id="{i}" name="{name}" width="{w}" height="{h}" subset="Train">')
        xml += [
            f'<box label="{names[c]}" source="manual" occluded="0" xtl="{x:.2f}" '
            f'ytl="{y:.2f}" xbr="{x + bw:.2f}" ybr="{y + bh:.2f}" z_order="0"/>'
            for c, x, y, bw, bh in own
        ]
        xml.append("</image>")
    xml.append("</annotations>\n")
    zips["cvat"].writestr("annotations.xml", "\n".join(xml))
    tasks = []
    for i, ((name, _), own) in enumerate(zip(images, boxes, strict=True)):
        result = [
            {"id": f"r{i}-{j}", "type": "rectanglelabels", "from_name": "label",
             "to_name": "image", "original_width": w, "original_height": h,
             "image_rotation": 0,
             "value": {"x": x / w * 100, "y": y / h * 100, "width": bw / w * 100,
                       "height": bh / h * 100, "rotation": 0, "rectanglelabels": [names[c]]}}
            for j, (c, x, y, bw, bh) in enumerate(own)
        ]  # fmt: skip
        tasks.append(
            {
                "id": i + 1,
                "data": {"image": f"/data/upload/1/{i:08x}-{name}"},
                "annotations": [{"id": i + 1, "result": result, "was_cancelled": False}],
                "predictions": [],
            }
        )
    zips["label-studio"].writestr("project-1-export.json", json.dumps(tasks))
    for zf in zips.values():
        zf.close()
    return paths


def format_row(fmt: str, archive: Path) -> None:
    """One row of --formats, in a process of its own: a clean database, the parse alone, then
    the whole import. Prints the row as JSON."""
    import json

    user, access = _bench_team(f"bench {fmt}")
    _earlier_runs_deleted(user.pk)
    from datasets.services.datasets import dataset_create
    from datasets.services.format_detect import detect_and_parse
    from datasets.services.ingest import dataset_import_path

    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        start = time.perf_counter()
        parsed = detect_and_parse(names, lambda n, limit: zf.read(n), task="detect", classes=[])
        parse = time.perf_counter() - start
    dataset = dataset_create(access=access, name=f"bench {fmt}", task="detect")
    start = time.perf_counter()
    imp = dataset_import_path(access=access, dataset=dataset, path=archive)
    whole = time.perf_counter() - start
    assert imp.status == "succeeded", imp.error
    row = {
        "format": imp.report["format"],
        "parsed_as": parsed.format,
        "images": imp.report["images_imported"],
        "labels": imp.report["labels_imported"],
        "parse_s": round(parse, 2),
        "import_s": round(whole, 2),
    }
    print(json.dumps(row), flush=True)


def formats_table(images: int) -> None:
    import json
    import subprocess

    cache = ROOT / "var" / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    paths = make_format_zips(cache, images)
    print(f"exports of {images:,} images ready in {time.perf_counter() - t:.1f} s")
    print(f"{'format':<22}{'labels':>9}{'parse s':>9}{'labels/s':>11}{'import s':>10}"
          f"{'labels/s':>11}")  # fmt: skip
    for fmt, path in paths.items():
        runs = []
        for _ in range(2):  # the better of two: this 2-core machine's figures wander ±20 %
            out = subprocess.run(
                [sys.executable, __file__, "--format-row", fmt, str(path)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        row = {
            **runs[0],
            "parse_s": min(r["parse_s"] for r in runs),
            "import_s": min(r["import_s"] for r in runs),
        }
        n = row["labels"]
        print(
            f"{row['format']:<22}{n:>9,}{row['parse_s']:>9.2f}{n / row['parse_s']:>11,.0f}"
            f"{row['import_s']:>10.2f}{n / row['import_s']:>11,.0f}"
        )


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--format-row":
        format_row(sys.argv[2], Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--formats", action="store_true", help="the same labels in each format, side by side"
    )
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--profile", help="write a cProfile of the import's main thread here")
    parser.add_argument("--no-thumbnails", action="store_true", help="measure the import only")
    args = parser.parse_args()
    if args.formats:
        formats_table(args.images)
        return

    cache = ROOT / "var" / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"ingest-{args.images}.zip"
    if not archive.exists():
        t = time.perf_counter()
        make_zip(archive, args.images)
        print(
            f"generated {archive.name} ({archive.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s"
        )

    user, access = _bench_team("bench")
    from django.db import connection

    from datasets.models import Blob
    from datasets.services.datasets import dataset_create
    from datasets.services.ingest import dataset_import_path
    from datasets.services.thumbnails import thumbnails_make

    # Start clean: earlier runs' rows would make every blob "already known" and thumbnailed.
    # This and the bare loop run in a process of their own, so that their memory (deleting a
    # dataset of 100,000 images loads its rows) is not counted as the import's.
    connection.close()
    with concurrent.futures.ProcessPoolExecutor(1) as other:
        other.submit(_earlier_runs_deleted, user.pk).result()
        bare = other.submit(bare_loop, archive).result()
    dataset = dataset_create(access=access, name="bench", task="detect")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    cpu_start = time.process_time()
    children_start = resource.getrusage(resource.RUSAGE_CHILDREN)
    if args.profile:
        import cProfile

        with cProfile.Profile() as profile:
            imp = dataset_import_path(access=access, dataset=dataset, path=archive)
        profile.dump_stats(args.profile)
    else:
        imp = dataset_import_path(access=access, dataset=dataset, path=archive)
    ingest = time.perf_counter() - start
    ingest_cpu = time.process_time() - cpu_start
    # The checking processes are let go as the import ends and reaped on a thread: their CPU
    # is counted once they are.
    for thread in threading.enumerate():
        if thread.name == "import-pool-join":
            thread.join()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    children_cpu = (children.ru_utime + children.ru_stime) - (
        children_start.ru_utime + children_start.ru_stime
    )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert imp.status == "succeeded", imp.error
    n = imp.report["images_imported"]

    blobs = Blob.objects.filter(images__dataset=dataset)
    blob_ids = list(blobs.values_list("id", flat=True))
    without = blobs.filter(has_thumbnail=False).count()  # the import makes them as it checks
    start = time.perf_counter()
    for i in range(0, 0 if args.no_thumbnails else len(blob_ids), 500):
        thumbnails_make(blob_ids=blob_ids[i : i + 500])
    thumbs = time.perf_counter() - start

    print(f"images imported            {n}")
    print(f"labels imported            {imp.report['labels_imported']}")
    print(f"import wall time           {ingest:.2f} s  = {n / ingest:,.0f} images/s committed")
    print(
        f"import CPU                 {ingest_cpu:.2f} s in this process, {children_cpu:.2f} s in "
        f"checking processes = {(ingest_cpu + children_cpu) / ingest:.2f} cores busy"
    )
    print(
        f"thumbnails left after it   {without} of {len(blob_ids)}, made by the worker's task in "
        f"{thumbs:.2f} s = {thumbs / ingest:.2f}x the import time"
    )
    print(f"bare hash+header loop      {bare:.2f} s  = {n / bare:,.0f} images/s")
    print(f"import / bare loop         {ingest / bare:.2f}x")
    print(
        f"peak RSS of this process   {peak_mib:.0f} MiB (before the import {rss_before / 1024:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
