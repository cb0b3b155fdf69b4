"""Gallery speed on a large dataset: p50/p95 of the gallery page and its query count.

Generates a dataset of N images (rows only; one box label each), then requests gallery pages at
keyset positions spread over the whole dataset, with and without filters, through Django's
test client (view + template, no network).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench .venv/bin/python bench/gallery.py
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOWED_HOSTS", "testserver")
os.environ.setdefault("DEBUG", "false")  # as served: no query log, cached templates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse

    call_command("migrate", verbosity=0)
    from billing.plans import plans_seed
    from datasets.models import Blob, Dataset, DatasetClass, Image, Label
    from workspaces.models import User
    from workspaces.services.workspaces import workspace_create_team

    plans_seed()
    user, _ = User.objects.get_or_create(email="bench-gallery@example.com")
    name = f"gallery-{args.images}"
    dataset = Dataset.objects.filter(name=name, workspace__memberships__user=user).first()
    if dataset is None:
        team = workspace_create_team(user=user, name=f"bench gallery {time.time():.0f}")
        dataset = Dataset.objects.create(workspace=team, name=name, task="detect")
        classes = [
            DatasetClass.objects.create(dataset=dataset, index=i, name=f"class{i}")
            for i in range(5)
        ]
        t = time.perf_counter()
        batch = 5000
        for start in range(0, args.images, batch):
            blobs = Blob.objects.bulk_create(
                Blob(
                    sha256=f"{name}-{i:058d}"[-64:].rjust(64, "0"),
                    size=1000,
                    content_type="image/jpeg",
                    width=640,
                    height=480,
                )
                for i in range(start, min(start + batch, args.images))
            )
            images = Image.objects.bulk_create(
                Image(
                    dataset=dataset,
                    blob=b,
                    filename=f"{i}.jpg",
                    split="val" if i % 5 == 0 else "train",
                    label_count=1,
                )
                for i, b in enumerate(blobs, start)
            )
            Label.objects.bulk_create(
                Label(image=im, dataset_class=classes[i % 5], kind="box", data=[0.5, 0.5, 0.2, 0.3])
                for i, im in enumerate(images, start)
            )
        print(f"generated {args.images} images in {time.perf_counter() - t:.1f} s")
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")  # what autovacuum would do soon after a bulk load

    client = Client()
    client.force_login(user)
    slug = dataset.workspace.slug
    url = reverse("dataset_gallery", kwargs={"ws_slug": slug, "pk": dataset.pk})
    ids = list(Image.objects.filter(dataset=dataset).order_by("id").values_list("id", flat=True))
    step = max(1, len(ids) // args.requests)
    positions = ids[::step][: args.requests]
    first_cls = dataset.classes.order_by("index").first().pk
    variants = {
        "plain": "",
        "split=val": "&split=val",
        "class": f"&class={first_cls}",
    }
    client.get(url)  # warm up
    for label, extra in variants.items():
        times, queries = [], set()
        for after in positions:
            with CaptureQueriesContext(connection) as ctx:
                t = time.perf_counter()
                response = client.get(f"{url}?after={after}{extra}")
                times.append((time.perf_counter() - t) * 1000)
            assert response.status_code == 200
            queries.add(len(ctx.captured_queries))
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        print(
            f"gallery {label:<10} n={len(times)}  p50 {statistics.median(times):6.1f} ms  "
            f"p95 {p95:6.1f} ms  queries per page {sorted(queries)}"
        )


if __name__ == "__main__":
    main()
