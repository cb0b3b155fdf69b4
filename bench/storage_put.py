"""The cost of storing an import's files: core.storage.storage_put on the local file system, for
N files of one size, written to new keys (a first import) and then again to the same keys (a
re-import, where each file is already there), from threads as the import's checking threads
do.

    .venv/bin/python bench/storage_put.py [--files 5000] [--size 60000] [--threads 4] [--runs 3]

Prints the best of --runs for each row, in microseconds a file. The media folder is a fresh
temp folder on the disk /tmp is on (--dir to choose another file system).
"""

import argparse
import hashlib
import inspect
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--size", type=int, default=60_000, help="bytes a file")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="make the media folder under this one")
    args = parser.parse_args()

    os.environ["MEDIA_ROOT"] = tempfile.mkdtemp(prefix="kestrel-bench-put-", dir=args.dir)
    import django

    django.setup()
    from core.storage import storage_put

    # Whether this storage_put takes expectations (it did not before temp-name writes).
    expects = "sha256" in inspect.signature(storage_put).parameters
    files = []
    for i in range(args.files):
        data = i.to_bytes(8, "big") * (args.size // 8)
        sha = hashlib.sha256(data).hexdigest()
        files.append((f"blobs/{sha[:2]}/{sha}", data, sha))

    def put(item) -> None:
        key, data, sha = item
        if expects:
            storage_put(key, data, size=len(data), sha256=sha)
        else:
            storage_put(key, data)

    def timed(run_index: int) -> tuple[float, float]:
        prefix = f"run{run_index}/"
        batch = [(prefix + k, d, s) for k, d, s in files]
        with ThreadPoolExecutor(max_workers=args.threads) as pool:
            t = time.perf_counter()
            list(pool.map(put, batch))
            first = time.perf_counter() - t
            t = time.perf_counter()
            list(pool.map(put, batch))
            again = time.perf_counter() - t
        return first, again

    try:
        results = [timed(i) for i in range(args.runs)]
    finally:
        shutil.rmtree(os.environ["MEDIA_ROOT"], ignore_errors=True)
    first = min(r[0] for r in results)
    again = min(r[1] for r in results)
    n = args.files
    print(f"storage_put with expectations: {expects}")
    print(f"{n:,} files of {args.size:,} bytes, {args.threads} threads, best of {args.runs}")
    print(f"new keys       {first:6.2f} s = {first / n * 1e6:7.1f} µs a file")
    print(f"existing keys  {again:6.2f} s = {again / n * 1e6:7.1f} µs a file")


if __name__ == "__main__":
    main()
