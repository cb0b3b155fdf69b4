"""What serving a model over HTTP costs, every caller path side by side in one run, printed
as one table (nothing asserts).

Latency (sequential requests, interleaved round-robin so the machine's load weighs on every row
alike; p50/p95 ms and "+ms over in-process"): Ultralytics in this process (`model.predict`), the
model server over HTTP (`python -m deploy.inference`), a dedicated endpoint process (same
program, its own port), and through the web (uvicorn, as `make run` serves it): an API key on
the shared API (`POST /api/v1/models/{id}/predict`), a browser session on the try-it page (the
same route, session cookie + CSRF), the dedicated endpoint via the web (`/d/<slug>/predict`),
and the public demo (a session of another team on a public model). Goal: each path at most
+5 ms p50 and +10 ms p95 over in-process; shown on the wall clock and outside the model's own
time (wall less Ultralytics' preprocess + inference + postprocess for that call).

Then: the API key's p95 while one caller sends bad input (too big, not an image, truncated,
a PNG bomb, bad conf/iou/imgsz), each of which must get a 4xx with the reason, from one address
(held back past its first refusals, core.refusal_pacing) and from 64 (barely); where the web's
time goes per hop (its Server-Timing header, deploy.predict); the model server's own row split
into its engine's share (the engine in this process against `model.predict`) and HTTP's;
throughput at 8 and 32 clients through the web against the model server's own (goal: within
10%); and micro-batching's ratio at --concurrency (goal ≥ 2x).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/predict.py [--requests 60] [--imgsz 640] [--clients 8,32]
        [--throughput-images 96] [--weights model.pt] [--image photo.jpg] [--device cpu|cuda:0]
        [--throughput-only]

Without a reachable database the rows through the web are skipped, saying why. The model is
yolo11n built from its YAML (nothing is downloaded) unless --weights names one.
"""

import argparse
import asyncio
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    free_port,
    plan_unlimited_predict,
    session_cookie,
    training_env,
    web_server,
    web_wait,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
# A photo over the 64 KB a caller may send before its credentials are looked at (99 KB), as
# nearly every real one is: its calls take the request guard's way too (config/body_limits.py).
IMAGE = ROOT.parent / "shared" / "datasets" / "coco8" / "images" / "val" / "000000000061.jpg"


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    ordered = sorted(samples_ms)
    return statistics.median(ordered), ordered[max(0, round(0.95 * len(ordered)) - 1)]


def image_bytes(image: Path | None = None) -> tuple[bytes, Path]:
    if image is not None:
        return image.read_bytes(), image
    if IMAGE.exists():
        return IMAGE.read_bytes(), IMAGE
    from PIL import Image

    path = Path(os.environ["TRAINING_DIR"]).parent / "bench.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.effect_noise((640, 480), 64).convert("RGB").save(path, quality=90)
    return path.read_bytes(), path


def weights_default(work: Path) -> Path:
    from annotation.assist.predict import _ultralytics_env

    _ultralytics_env()
    from ultralytics import YOLO

    path = work / "yolo11n.pt"
    YOLO("yolo11n.yaml").save(path)
    return path


def in_process_call(weights: Path, image: Path, *, imgsz: int, device: str):
    from ultralytics import YOLO

    model = YOLO(str(weights))
    return lambda: model.predict(str(image), imgsz=imgsz, device=device, verbose=False)


class Server:
    """An inference server process of this run."""

    def __init__(self, name: str, *args: str, env: dict | None = None, root: Path = ROOT):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "deploy.inference", "--host", "127.0.0.1", "--port",
             str(self.port), "--name", name, *args],
            cwd=root, env={**os.environ, **(env or {})}, start_new_session=True,
        )  # fmt: skip

    def wait(self) -> "Server":
        import httpx

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"inference server exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.2)
        raise SystemExit("inference server did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def server_auth(server: "Server", action: str = "predict", weights: Path | None = None) -> dict:
    """A call's own token, as web processes mint them (one server, one model, a minute)."""
    from deploy.inference.tokens import inference_token

    token = inference_token(
        secret=os.environ["INFERENCE_TOKEN"],
        server=server.name,
        action=action,
        model_key="bench:1" if weights else "",
        model_path=str(weights) if weights else "",
    )
    return {"Authorization": f"Bearer {token}"}


def server_headers(weights: Path, server: "Server") -> dict:
    return {
        **server_auth(server, "predict", weights),
        "X-Model-Path": str(weights),
        "X-Model-Key": "bench:1",
        "X-Model-Name": "bench",
    }


def model_ms(answer) -> float:
    """Ultralytics' own time for the image (preprocess + inference + postprocess), from its
    Results in this process or from the answer's `speed` over HTTP."""
    speed = answer[0].speed if isinstance(answer, list) else answer.json()["images"][0]["speed"]
    return sum(speed.values())


def interleaved(calls: list[tuple[str, object]], n: int) -> dict[str, list[tuple[float, float]]]:
    """(ms per call, of which outside the model) of each, measured round-robin, so a machine's
    changing load weighs on every row alike; an HTTP answer other than 200 stops the bench."""
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in calls}
    for round_ in range(5 + n):
        for label, call in calls:
            started = time.perf_counter()
            response = call()
            elapsed = (time.perf_counter() - started) * 1000
            if getattr(response, "status_code", 200) != 200:
                raise SystemExit(f"{label}: HTTP {response.status_code}: {response.text[:300]}")
            if round_ >= 5:  # the first rounds warm up
                samples[label].append((elapsed, elapsed - model_ms(response)))
    return samples


def throughput(server, weights: Path, data: bytes, params: dict, *, clients: int, n: int):
    """Images per second with `clients` callers each sending its next image when the last one
    is answered, `n` images in all."""
    import httpx

    async def run() -> float:
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(timeout=300, limits=limits) as client:
            left = 2 * clients  # warm up first

            async def caller():
                nonlocal left
                while left > 0:
                    left -= 1
                    r = await client.post(
                        f"{server.url}/predict",
                        params=params,
                        content=data,
                        headers=server_headers(weights, server),
                    )
                    if r.status_code != 200:
                        raise SystemExit(f"HTTP {r.status_code}: {r.text[:300]}")

            await asyncio.gather(*(caller() for _ in range(clients)))
            left = n
            started = time.perf_counter()
            await asyncio.gather(*(caller() for _ in range(clients)))
            return n / (time.perf_counter() - started)

    return asyncio.run(run())


WEB_ROWS = (
    "API key, shared API /api/v1/models/{id}/predict",
    "browser session, try-it page (same route)",
    "dedicated endpoint via the web /d/<slug>/predict",
    "public demo, another team's session",
)


def csrf_pair() -> tuple[str, str]:
    """(cookie, header) a browser sends with a form post: the page's CSRF secret twice."""
    secret = "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(32))
    return f"csrftoken={secret}", secret


def web_setup(weights: Path, params: dict, shared: Server, dedicated: Server):
    """The web and what its callers need: (skip reason or None, web process, a dict of
    label → (url, headers) per caller path, the API key's URL and headers for the throughput
    and bad-input rows)."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage
    from django.core.management import call_command
    from django.db import connection
    from django.db.utils import OperationalError

    try:
        connection.ensure_connection()
    except OperationalError as e:
        return f"skipped: no database ({str(e).strip().splitlines()[0][:80]})", None, {}
    call_command("migrate", verbosity=0)
    from deploy.models import Deployment, DeploymentState
    from training.models import TrainedModel
    from workspaces.models import Project, User
    from workspaces.selectors import workspace_access_for_user
    from workspaces.services.keys import api_key_create
    from workspaces.services.workspaces import workspace_create_team

    tag = secrets.token_hex(4)
    user, _ = User.objects.get_or_create(email="bench-predict@example.com")
    outsider, _ = User.objects.get_or_create(email="bench-predict-demo@example.com")
    workspace = workspace_create_team(user=user, name=f"bench predict {tag}")
    plan_unlimited_predict(workspace)
    access = workspace_access_for_user(user=user, slug=workspace.slug)
    project = Project.objects.create(workspace=workspace, name="bench", created_by=user)
    model = TrainedModel.objects.create(
        workspace=workspace, project=project, name="bench", task="detect",
        architecture="yolo11n", imgsz=params["imgsz"], weights_key="",
        weights_size=weights.stat().st_size, is_public=True,
    )  # fmt: skip
    model.weights_key = default_storage.save(
        f"models/{model.pk}/weights.pt", ContentFile(weights.read_bytes())
    )
    model.save(update_fields=["weights_key"])
    deployment = Deployment.objects.create(
        # The slug the dedicated server was started for: web processes mint its tokens by it.
        workspace=workspace, model=model, slug=dedicated.name.removeprefix("deployment-"),
        name="bench",
        state=DeploymentState.RUNNING, port=dedicated.port, host="127.0.0.1",
    )  # fmt: skip
    _, raw = api_key_create(access=access, name="bench", scopes=["predict"])

    port = free_port()
    env_before = dict(os.environ)
    # Served as in production: DEBUG off (no SQL kept per request, no debug pages).
    os.environ.update(INFERENCE_URL=shared.url, DEPLOY_HOST="127.0.0.1", DEBUG="false")
    web = web_server(port)
    os.environ.clear()
    os.environ.update(env_before)
    base = f"http://127.0.0.1:{port}"
    web_wait(base)
    api = f"{base}/api/v1/models/{model.pk}/predict"
    by_key = {"Authorization": f"Bearer {raw}"}

    def browser(person) -> dict:
        name, value = session_cookie(person)
        cookie, token = csrf_pair()
        return {"Cookie": f"{name}={value}; {cookie}", "X-CSRFToken": token}

    paths = dict(
        zip(
            WEB_ROWS,
            (
                (api, by_key),
                (api, browser(user)),
                (f"{base}/d/{deployment.slug}/predict", by_key),
                (api, browser(outsider)),
            ),
            strict=True,
        )
    )
    return None, web, paths


def web_post(client, url: str, headers: dict, data: bytes, params: dict, name="bench.jpg"):
    return client.post(
        url, headers=headers, files={"file": (name, data, "image/jpeg")}, data=params
    )


def hops_of(response) -> dict[str, float]:
    """The web's Server-Timing header: milliseconds per hop (deploy.predict)."""
    hops = {}
    for part in response.headers.get("server-timing", "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            hops[name] = float(dur)
        elif name in ("short", "kept"):  # config.predict_route answered it; a kept lookup
            hops[name] = 1.0
    return hops


def bad_inputs(data: bytes, params: dict) -> list[tuple[str, bytes, dict]]:
    """(what, file, parameters) a careless or hostile caller sends."""
    import io

    from PIL import Image

    bomb = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(bomb, format="PNG")  # 400 Mpx in a few dozen KB
    return [
        ("too big (21 MB)", secrets.token_bytes(21 * 1024 * 1024), params),
        ("not an image", b"%PDF-1.4 this is not a picture" * 10, params),
        ("truncated JPEG", data[: len(data) // 2], params),
        (f"PNG bomb (20000x20000, {len(bomb.getvalue()) // 1024} KB)", bomb.getvalue(), params),
        ("conf=-1", data, {**params, "conf": "-1"}),
        ("iou=7", data, {**params, "iou": "7"}),
        ("imgsz=100000", data, {**params, "imgsz": "100000"}),
    ]


def bad_caller(url: str, headers: dict, inputs, addresses, connections, stop, answered) -> None:
    """One caller sending bad input, one request after another on each of `connections`
    connections at once, from each of `addresses` in turn, until `stop` is set; then what each
    was answered, put on `answered`. A process of its own: as a thread of the bench, its
    client's work (a 21 MB body encoded and sent) held the good callers' client up on the
    bench's own interpreter lock, and that counted as the web slowing them."""
    import itertools
    import threading

    import httpx

    answers = {}
    lock = threading.Lock()
    # Each request encoded once, then sent as it is: the caller's own work (a 21 MB multipart
    # body built again each time, 8 ms of this machine's CPU) is no part of what the web spends
    # on it, and a caller elsewhere would not take it from the web's cores.
    with httpx.Client() as builder:
        built = []
        for what, body, query in inputs:
            request = builder.build_request(
                "POST", url, headers=headers, files={"file": ("bad.jpg", body, "image/jpeg")},
                data=query,
            )  # fmt: skip
            built.append((what, request.read(), request.headers["content-type"]))

    def send(first: int) -> None:
        clients = [
            httpx.Client(timeout=120, transport=httpx.HTTPTransport(local_address=address))
            for address in addresses
        ]
        try:
            requests = itertools.islice(itertools.cycle(built), first, None)
            for (what, content, content_type), client in zip(requests, itertools.cycle(clients)):
                if stop.is_set():
                    break
                sent = time.perf_counter()
                r = client.post(
                    url, headers={**headers, "Content-Type": content_type}, content=content
                )
                took = time.perf_counter() - sent
                detail = ""
                if r.headers.get("content-type", "").startswith("application/json"):
                    detail = r.json().get("detail", "")
                with lock:
                    _, _, count, total = answers.get(what, (0, "", 0, 0.0))
                    answers[what] = (r.status_code, detail, count + 1, total + took)
        finally:
            for client in clients:
                client.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=send, args=(n,)) for n in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answered.put((answers, time.perf_counter() - started))


def throughput_web(url: str, headers: dict, data: bytes, params: dict, *, clients: int, n: int):
    """Images per second through the web with `clients` callers, as `throughput`."""
    import httpx

    async def run() -> float:
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(timeout=300, limits=limits, headers=headers) as client:
            left = 2 * clients

            async def caller():
                nonlocal left
                while left > 0:
                    left -= 1
                    r = await client.post(
                        url, files={"file": ("bench.jpg", data, "image/jpeg")}, data=params
                    )
                    if r.status_code != 200:
                        raise SystemExit(f"HTTP {r.status_code}: {r.text[:300]}")

            await asyncio.gather(*(caller() for _ in range(clients)))
            left = n
            started = time.perf_counter()
            await asyncio.gather(*(caller() for _ in range(clients)))
            return n / (time.perf_counter() - started)

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=60, help="per latency row")
    parser.add_argument("--imgsz", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=8, help="of the batching ratio")
    parser.add_argument(
        "--clients", default="8,32", help="concurrent callers of the throughput rows"
    )
    parser.add_argument("--throughput-images", type=int, default=96, help="per throughput row")
    parser.add_argument("--weights", type=Path)
    parser.add_argument(
        "--image",
        type=Path,
        help="the image every call sends (default coco8's 000000000036.jpg, 48 KB: under the "
        "64 KB a caller may send before the request guard looks at its credentials; a photo "
        "over it, such as 000000000061.jpg, measures that look too)",
    )
    parser.add_argument("--device", help="cpu or cuda:0 (default: cuda:0 when there is one)")
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="only the micro-batching ratio: two model servers, no database, no web",
    )
    args = parser.parse_args()

    work = training_env("predict-bench")
    os.environ.setdefault("INFERENCE_TOKEN", secrets.token_hex(16))
    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    import torch

    device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    weights = (args.weights or weights_default(work)).resolve()
    data, image = image_bytes(args.image)
    params = {"conf": 0.25, "iou": 0.7, "imgsz": args.imgsz}
    n = args.requests
    import httpx

    print(f"model {weights.name}, image {image.name} ({len(data) // 1024} KB), imgsz "
          f"{args.imgsz}, device {device}, {n} requests a row, torch threads "
          f"{torch.get_num_threads()}, {os.cpu_count()} CPUs", flush=True)  # fmt: skip
    device_args = ["--device", device]
    total = max(8 * args.concurrency, n)
    if args.throughput_only:
        shared = Server("shared", *device_args).wait()
        one_at_a_time = Server("one-at-a-time", *device_args, "--batch-max", "1").wait()
        try:
            ratio = batching(shared, one_at_a_time, weights, data, params, args.concurrency, total)
        finally:
            shared.stop()
            one_at_a_time.stop()
        batching_print(args.concurrency, total, *ratio)
        return
    calls: list[tuple[str, object]] = [
        (
            "in-process model.predict",
            in_process_call(weights, image, imgsz=args.imgsz, device=device),
        )
    ]
    shared = Server("shared", *device_args).wait()
    dedicated = Server(
        f"deployment-bench-{secrets.token_hex(4)}",
        *device_args,
        "--model-path",
        str(weights),
        "--model-key",
        "bench:1",
    ).wait()
    one_at_a_time = Server("one-at-a-time", *device_args, "--batch-max", "1").wait()
    web = None
    hops: dict[str, list[dict]] = {}
    rates: list[tuple[int, float, float | str]] = []
    bad_rows: list = []
    floods: list = []
    try:
        client = httpx.Client(timeout=120)
        for label, server in (
            ("model server, HTTP", shared),
            ("dedicated endpoint, HTTP", dedicated),
        ):
            calls.append(
                (
                    label,
                    lambda s=server: client.post(
                        f"{s.url}/predict",
                        params=params,
                        content=data,
                        headers=server_headers(weights, s),
                    ),
                )
            )
        skipped, web, paths = web_setup(weights, params, shared, dedicated)
        for label in WEB_ROWS:
            if skipped:
                calls.append((label, skipped))
                continue
            url, headers = paths[label]
            hops[label] = []

            def call(url=url, headers=headers, label=label):
                response = web_post(client, url, headers, data, params)
                hops[label].append(hops_of(response))
                return response

            calls.append((label, call))
        web_cpu = WebCpu(web)
        measured = interleaved([(label, call) for label, call in calls if callable(call)], n)
        web_cpu.stop(calls=sum(len(h) for h in hops.values()))
        rows = [(label, measured.get(label, call)) for label, call in calls]
        if not skipped:
            bad_rows, floods = bad_input_rows(calls[0], paths[WEB_ROWS[0]], data, params, n)
        for clients in (int(c) for c in args.clients.split(",")):
            own = throughput(
                shared, weights, data, params, clients=clients, n=args.throughput_images
            )
            try:
                through = skipped or throughput_web(
                    *paths[WEB_ROWS[0]], data, params, clients=clients, n=args.throughput_images
                )
            except SystemExit as failed:  # a row that fails says why; the rest still print
                through = f"failed: {failed}"
            rates.append((clients, own, through))
        ratio = batching(shared, one_at_a_time, weights, data, params, args.concurrency, total)
        split = engine_split(weights, image, data, params, device=device, n=n)
    finally:
        if web is not None:
            os.killpg(web.pid, signal.SIGTERM)
            web.wait(timeout=15)
        for server in (shared, dedicated, one_at_a_time):
            server.stop()

    latency_print(rows + bad_rows)
    floods_print(floods)
    hops_print(rows, hops)
    web_cpu.print()
    engine_print(rows, split)
    print(f"\nthroughput, {args.throughput_images} images a row")
    print(f"{'clients':>8} {'model server':>14} {'web API (key)':>15} {'web / server':>13}")
    for clients, own, through in rates:
        if isinstance(through, str):
            print(f"{clients:8} {own:10.1f} /s  {through}")
            continue
        share = through / own
        print(f"{clients:8} {own:10.1f} /s {through:11.1f} /s {share:12.0%} "
              f"({'met' if share >= 0.9 else 'NOT met'}: goal ≥ 90%)")  # fmt: skip
    batching_print(args.concurrency, total, *ratio)


# Where the bad input comes from: one address, which core.refusal_pacing holds back past its
# first refusals, and many (a caller spread over addresses, or many careless callers), which
# it barely does: what the refusals themselves cost the good callers.
# (where from, its addresses, connections at once); the good callers' is 127.0.0.1.
FLOODS = (
    ("one address", ["127.0.0.2"], 1),
    ("one address, 32 connections at once", ["127.0.0.2"], 32),
    ("64 addresses", [f"127.0.1.{i}" for i in range(1, 65)], 1),
)


def bad_input_rows(base_call, key_path, data: bytes, params: dict, n: int):
    """[(label, samples)] of good callers (in-process, then the API key through the web, in
    turn) while one caller sends bad input, from each of FLOODS; and per flood, what each bad
    input was answered and how many a second the caller sent."""
    import multiprocessing

    import httpx

    url, headers = key_path
    spawn = multiprocessing.get_context("spawn")
    rows, floods = [], []
    client = httpx.Client(timeout=120)
    for where, addresses, connections in FLOODS:
        stop, answered = spawn.Event(), spawn.Queue()
        caller = spawn.Process(
            target=bad_caller,
            args=(url, headers, bad_inputs(data, params), addresses, connections, stop, answered),
        )
        caller.start()
        try:
            label = f"API key, while bad input comes from {where}"
            measured = interleaved(
                [base_call, (label, lambda: web_post(client, url, headers, data, params))], n
            )
        finally:
            stop.set()
        answers, seconds = answered.get(timeout=120)
        caller.join(timeout=30)
        for what, (status, detail, _, _) in answers.items():
            if not 400 <= status < 500 or not detail:
                raise SystemExit(
                    f"bad input {what!r}: HTTP {status} {detail!r}, not a 4xx with why"
                )
        rows.append((label + " (in-process alongside: " + _p(measured[base_call[0]]) + ")",
                     measured[label]))  # fmt: skip
        floods.append((where, answers, sum(a[2] for a in answers.values()) / seconds))
    client.close()
    return rows, floods


def floods_print(floods) -> None:
    for where, answers, rate in floods:
        print(f"\nbad input from {where}, each answered ({rate:.0f} calls a second in all; "
              "how many, mean ms):")  # fmt: skip
        for what, (status, detail, count, took) in answers.items():
            print(f"  {what:34} {status} {count:5} {1000 * took / count:7.1f}  {detail[:70]}")


def engine_split(weights: Path, image: Path, data: bytes, params: dict, *, device: str, n: int):
    """(in-process, engine) ms outside the model, measured round-robin in this process: the
    model server's engine (decoding and predicting on its own threads, no HTTP) against
    `model.predict`, so the model server row splits into the engine's share and HTTP's."""
    from deploy.inference.engine import Engine
    from deploy.inference.inputs import params_parse

    direct = in_process_call(weights, image, imgsz=params["imgsz"], device=device)
    query, output = params_parse({k: str(v) for k, v in params.items()})

    async def run() -> tuple[list[float], list[float]]:
        engine = Engine(device=device)
        await engine.start()
        own: list[float] = []
        through: list[float] = []
        try:
            for round_ in range(5 + n):
                started = time.perf_counter()
                answer = direct()
                direct_ms = (time.perf_counter() - started) * 1000 - model_ms(answer)
                started = time.perf_counter()
                image_answer = await engine.predict(
                    key="bench", path=weights, data=data, params=query, output=output
                )
                engine_ms = (time.perf_counter() - started) * 1000
                engine_ms -= sum(image_answer["speed"].values())
                if round_ >= 5:
                    own.append(direct_ms)
                    through.append(engine_ms)
        finally:
            await engine.close()
        return own, through

    return asyncio.run(run())


def engine_print(rows, split) -> None:
    own, through = split
    server = dict(rows).get("model server, HTTP")
    base = rows[0][1]
    if isinstance(server, str) or not own:
        return
    engine_added = statistics.median(through) - statistics.median(own)
    server_added = percentiles([out for _, out in server])[0]
    server_added -= percentiles([out for _, out in base])[0]
    print(f"\nthe model server's +{server_added:.1f} ms, split (p50, outside the model): its "
          f"engine in this process +{engine_added:.1f} over model.predict "
          f"({statistics.median(own):.1f} vs {statistics.median(through):.1f}), "
          f"the rest (HTTP, the client, the other processes' work between calls) "
          f"{server_added - engine_added:+.1f}")  # fmt: skip


def _p(samples) -> str:
    p50, p95 = percentiles([wall for wall, _ in samples])
    return f"{p50:.0f}/{p95:.0f} ms"


def latency_print(rows) -> None:
    """One table: each path's p50 and p95, and what it adds over the model in this process
    (goal: +5 ms p50, +10 ms p95), on the wall clock and outside the model's own time."""
    # Two identical server processes differ by up to ±10 ms p50 on a small shared VM, because
    # the model's own time swings that much; the time outside the model (the wall time less
    # Ultralytics' own preprocess + inference + postprocess for that very call) is what serving
    # adds, and it holds still. Both are shown; the goal is judged on both.
    base = rows[0][1]
    base_p50, base_p95 = percentiles([wall for wall, _ in base])
    base_out50, base_out95 = percentiles([out for _, out in base])
    print(f"\n{'latency (sequential, interleaved), ms':50} {'p50':>6} {'p95':>6} {'+p50':>6} "
          f"{'+p95':>6} | {'outside the model: p50':>22} {'p95':>5} {'+p50':>6} {'+p95':>6}  goal")  # fmt: skip
    for label, samples in rows:
        if isinstance(samples, str):
            print(f"{label:50} {samples}")
            continue
        p50, p95 = percentiles([wall for wall, _ in samples])
        out50, out95 = percentiles([out for _, out in samples])
        if samples is base:
            print(f"{label:50} {p50:6.1f} {p95:6.1f} {'':6} {'':6} | {out50:22.1f} {out95:5.1f}")
            continue
        wall_met = p50 - base_p50 <= 5 and p95 - base_p95 <= 10
        out_met = out50 - base_out50 <= 5 and out95 - base_out95 <= 10
        goal = f"wall {'met' if wall_met else 'NOT met'}, outside {'met' if out_met else 'NOT met'}"
        print(f"{label:50} {p50:6.1f} {p95:6.1f} {p50 - base_p50:+6.1f} {p95 - base_p95:+6.1f} | "
              f"{out50:22.1f} {out95:5.1f} {out50 - base_out50:+6.1f} {out95 - base_out95:+6.1f}  "
              f"{goal}")  # fmt: skip


def hops_print(rows, hops: dict[str, list[dict]]) -> None:
    """Where a web path's time goes, p50 of each hop (its Server-Timing header): the caller
    lookup, rate limit, reading the body, checking the image, the model server; `web stack` is
    the rest of the wall time (uvicorn, Django's middleware, django-ninja, the client's
    multipart encoding), `model server` its wait less the model's own time."""
    measured = {label: samples for label, samples in rows if not isinstance(samples, str)}
    names = ["auth", "limit", "body", "image", "model"]
    if not any(hops.values()):
        return
    print(f"\nwhere the web's time goes, p50 ms {'':16} {'web stack':>9} "
          + " ".join(f"{n:>6}" for n in names) + f" {'server':>7} {'model':>6} {'short':>6} {'kept':>6}")  # fmt: skip
    for label, calls in hops.items():
        calls = calls[-len(measured[label]) :]  # the measured rounds, not the warm-up
        walls = [wall for wall, _ in measured[label]]
        model_own = [wall - out for wall, out in measured[label]]
        stack = [wall - h.get("view", 0) for wall, h in zip(walls, calls, strict=True)]
        server = [h.get("model", 0) - m for h, m in zip(calls, model_own, strict=True)]
        med = [statistics.median(h.get(n, 0) for h in calls) for n in names]
        short = sum(1 for h in calls if h.get("short")) / len(calls)
        kept = sum(1 for h in calls if h.get("kept")) / len(calls)
        print(f"{label[:49]:49} {statistics.median(stack):9.1f} "
              + " ".join(f"{v:6.2f}" for v in med)
              + f" {statistics.median(server):7.1f} {statistics.median(model_own):6.1f}"
              + f" {short:6.0%} {kept:6.0%}")  # fmt: skip


class WebCpu:
    """The CPU the web process spent on each of its calls in the latency rows (all its threads;
    user and system), from psutil: what a call costs the web, on the answer's path or not."""

    def __init__(self, web):
        import psutil

        self.process = psutil.Process(web.pid) if web is not None else None
        self.before = self.process.cpu_times() if self.process else None
        self.per_call = None

    def stop(self, *, calls: int) -> None:
        if self.process is None or not calls:
            return
        after = self.process.cpu_times()
        self.per_call = (
            (after.user - self.before.user) * 1000 / calls,
            (after.system - self.before.system) * 1000 / calls,
        )

    def print(self) -> None:
        if self.per_call is not None:
            user, system = self.per_call
            print(f"\nthe web process's CPU per call (all its threads): {user + system:.2f} ms "
                  f"(user {user:.2f}, system {system:.2f})")  # fmt: skip


def batching(shared, one_at_a_time, weights, data, params, clients: int, total: int):
    """(images/s one at a time, images/s micro-batched, mean batch) at `clients` callers."""
    import httpx

    client = httpx.Client(timeout=120)
    single = throughput(one_at_a_time, weights, data, params, clients=clients, n=total)
    stats_auth = server_auth(shared, "stats")
    loaded = client.get(f"{shared.url}/stats", headers=stats_auth).json()["models"]
    before = loaded.get("bench:1", {"images": 0, "batches": 0})  # not loaded yet: nothing done
    batched = throughput(shared, weights, data, params, clients=clients, n=total)
    stats_auth = server_auth(shared, "stats")
    after = client.get(f"{shared.url}/stats", headers=stats_auth).json()["models"]["bench:1"]
    images = after["images"] - before["images"]
    batches = max(1, after["batches"] - before["batches"])
    return single, batched, images / batches


def batching_print(clients: int, total: int, single: float, batched: float, mean: float) -> None:
    print(f"\nthroughput at concurrency {clients}, {total} images")
    print(f"{'one at a time (INFERENCE_BATCH_MAX=1)':42} {single:8.1f} images/s")
    print(f"{'micro-batched':42} {batched:8.1f} images/s (mean batch {mean:.1f} images)")
    print(f"ratio {batched / single:.2f}x (goal ≥ 2x): {'met' if batched >= 2 * single else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    main()
