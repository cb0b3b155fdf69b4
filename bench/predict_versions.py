"""Two versions of the serving code side by side in one run, so a change to the predict path is
measured against the code before it on the same machine at the same moment (a small VM's speed
moves by 30-50% through a day: two runs of bench/predict.py an hour apart cannot tell 1 ms).

Each version gets its own model server and its own web process (this checkout's, and the one in
--old, e.g. `git worktree add /tmp/old <commit>`), on one database; calls with an API key go to
each in turn, interleaved with the model in this process. Printed: each one's p50/p95 outside
the model (the wall less Ultralytics' own time for that call) and over in-process, and its web
process's CPU per call (all threads, its after-answer work included).

    git worktree add /tmp/old <commit>
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/predict_versions.py --old /tmp/old [--requests 120]
"""

import argparse
import os
import secrets
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bench.predict as predict  # noqa: E402
from bench.common import free_port, training_env, web_server, web_wait  # noqa: E402


class Checkout:
    """One version's model server and web process, started from `root`."""

    def __init__(self, label: str, root: Path):
        self.label, self.root = label, root
        self.server = predict.Server("shared", "--device", "cpu", root=root).wait()
        self.web = None
        self.url = ""

    def web_start(self, url: str) -> None:
        """This version's web on a port of its own, sending to its own model server; `url`, the
        API's predict URL on any web, is moved onto it."""
        port = free_port()
        env = dict(os.environ)
        os.environ.update(INFERENCE_URL=self.server.url, DEPLOY_HOST="127.0.0.1", DEBUG="false")
        try:
            self.web = web_server(port, root=self.root)
        finally:
            os.environ.clear()
            os.environ.update(env)
        base = f"http://127.0.0.1:{port}"
        self.url = base + url[url.index("/api/") :]
        web_wait(base)

    def stop(self) -> None:
        if self.web is not None and self.web.poll() is None:
            os.killpg(self.web.pid, signal.SIGTERM)
            self.web.wait(timeout=15)
        self.server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", type=Path, required=True, help="a checkout of the other version")
    parser.add_argument("--requests", type=int, default=120, help="per row")
    args = parser.parse_args()
    if not (args.old / "deploy" / "inference").is_dir():
        raise SystemExit(f"{args.old} is not a Kestrel checkout")

    work = training_env("predict-versions")
    os.environ.setdefault("INFERENCE_TOKEN", secrets.token_hex(16))
    import django

    django.setup()
    import logging

    import httpx
    import psutil

    logging.getLogger("httpx").setLevel(logging.WARNING)
    weights = predict.weights_default(work).resolve()
    data, image = predict.image_bytes(None)
    params = {"conf": 0.25, "iou": 0.7, "imgsz": 640}
    versions = [Checkout("this checkout", ROOT), Checkout(f"--old {args.old}", args.old.resolve())]

    class NoEndpoint:  # web_setup's deployment row wants one; no row here is called
        name, port = f"deployment-versions-{secrets.token_hex(3)}", 9

    try:
        skipped, first_web, paths = predict.web_setup(
            weights, params, versions[0].server, NoEndpoint
        )
        if skipped:
            raise SystemExit(skipped)
        os.killpg(first_web.pid, signal.SIGTERM)  # each version starts its own below
        first_web.wait(timeout=15)
        url, headers = paths[predict.WEB_ROWS[0]]
        for version in versions:
            version.web_start(url)
        client = httpx.Client(timeout=120)
        direct = predict.in_process_call(weights, image, imgsz=640, device="cpu")
        outside: dict[str, list[float]] = {"in-process": []}
        cpu = {version.label: 0.0 for version in versions}
        processes = {version.label: psutil.Process(version.web.pid) for version in versions}
        for version in versions:
            outside[version.label] = []
        for round_ in range(5 + args.requests):
            started = time.perf_counter()
            answer = direct()
            if round_ >= 5:
                outside["in-process"].append(
                    (time.perf_counter() - started) * 1000 - predict.model_ms(answer)
                )
            for version in versions:
                process = processes[version.label]
                before = sum(process.cpu_times()[:2])
                started = time.perf_counter()
                answer = predict.web_post(client, version.url, headers, data, params)
                wall = (time.perf_counter() - started) * 1000
                if answer.status_code != 200:
                    raise SystemExit(f"{version.label}: {answer.status_code} {answer.text[:200]}")
                time.sleep(0.02)  # its work after the answer (usage) is counted too
                if round_ >= 5:
                    outside[version.label].append(wall - predict.model_ms(answer))
                    cpu[version.label] += sum(process.cpu_times()[:2]) - before
    finally:
        for version in versions:
            version.stop()

    base = statistics.median(outside["in-process"])
    print(
        f"\n{args.requests} calls each, API key, outside the model (ms)   p50    p95   +p50   web CPU/call"
    )
    for label, samples in outside.items():
        p50, p95 = predict.percentiles(samples)
        own = f"{cpu[label] * 1000 / args.requests:10.2f}" if label in cpu else ""
        print(f"{label[:50]:50} {p50:6.2f} {p95:6.2f} {p50 - base:+6.2f} {own}")


if __name__ == "__main__":
    main()
