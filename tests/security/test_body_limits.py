"""Issue 31, part 1: request bodies bounded before they are read.

Against a real web server (`python -m config.web`, as `make run` serves it) with raw sockets:
a body declared over its route's limit, a chunked body past it, headers past their cap,
clients that drip their headers or body, and more uploads at once than an address or a caller
may send. Each gets its answer (not a server that reads on), and the server keeps nothing in
its temporary folder. Credentials and the plan raise a route's limit; no credentials, or ones
that do not reach the route, do not. And compose puts a front server with matching figures
before the web.
"""

import contextlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.test import Client

from annotation.masks import MASK_MAX_BYTES
from billing.plans import DEFAULT_PLANS
from core.request_guard import MAX_HEAD_BYTES, size_text
from datasets.views.uploads import MAX_FILE_LIST_BYTES
from tests.datasets.factories import DatasetFactory
from tests.servers import ROOT, WebProcess
from tests.workspaces.factories import UserFactory
from training.models import JobState, TrainingJob
from training.run_files import MAX_WEIGHTS_BYTES
from workspaces.models import Project
from workspaces.services.keys import api_key_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HUGE = 107_374_182_400  # 100 GB
ANSWER_SECONDS = 10  # far more than an answer takes; the old server never answered
GIB = 2**30


@contextlib.contextmanager
def web_server(tmp_path: Path, **env: str):
    """The web server, its temporary files in a folder of this test's."""
    temp = tmp_path / "server-tmp"
    temp.mkdir()
    web = WebProcess()
    web.env.update(TMPDIR=str(temp), LOG_LEVEL="ERROR", **env)
    web.start()
    web.temp = temp
    try:
        yield web
    finally:
        web.kill()


def kept(web) -> list[str]:
    """Files in the server's temporary folder, and files there it holds open (deleted or
    never named: Django's spooled body)."""
    files = [str(p) for p in web.temp.rglob("*") if p.is_file()]
    for fd in Path(f"/proc/{web.proc.pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(str(web.temp)):
                files.append(os.readlink(fd))
    return files


def connect(web) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", web.port), timeout=ANSWER_SECONDS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def head(method: str, path: str, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(sock: socket.socket) -> tuple[int, dict, bytes]:
    """One response read off the socket: status, headers, body (by its Content-Length)."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        top, _, body = data.partition(b"\r\n\r\n")
        lines = top.decode("latin-1").split("\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        while len(body) < int(fields.get("content-length", 0)):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    except TimeoutError:
        pytest.fail(f"no answer within {ANSWER_SECONDS} s (got {data[:200]!r}): still reading")
    if not lines[0]:
        pytest.fail(f"the connection closed without an answer (got {data[:200]!r})")
    return int(lines[0].split()[1]), fields, body


def ask(web, method: str, path: str, declared: int, **headers: str) -> tuple[int, bytes]:
    """Declare a body and wait, as curl does for a large one (Expect: 100-continue): 100 means
    the server is ready to read it, anything else is its answer without reading it."""
    with connect(web) as sock:
        sock.sendall(
            head(method, path, Content_Length=str(declared), Expect="100-continue", **headers)
        )
        status, _, body = answer(sock)
    return status, body


def refusal_text(body: bytes) -> str:
    with contextlib.suppress(ValueError):
        data = json.loads(body)
        return data.get("detail") or data.get("error")
    return body.decode()


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


@pytest.fixture
def birds(team) -> Project:
    return Project.objects.create(workspace=team.workspace, name="Birds", created_by=team.owner)


def platform_upload_path(team, birds) -> str:
    """A live signed upload URL of a stock-client run, as stock `ultralytics` gets it."""
    key = api_key_create(access=team.access("admin"), name="laptop", scopes=["train"])[1]
    client, auth = Client(), {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    started = {"event": "training_started", "project": "acme/birds", "name": "run1"}
    started["data"] = {"trainArgs": {"task": "detect", "epochs": "1"}, "epochs": 1}
    run = client.post(
        "/api/webhooks/training/metrics", started, content_type="application/json", **auth
    )
    assert run.status_code == 200, run.content
    ask_url = {"modelId": run.json()["modelId"], "filename": "best.pt"}
    url = client.post("/api/webhooks/models/upload", ask_url, "application/json", **auth)
    assert url.status_code == 200, url.content
    return url.json()["uploadUrl"].removeprefix("http://testserver")


def test_a_body_over_its_routes_limit_is_answered_before_it_is_read(tmp_path, team, birds):
    pro = team.workspace.plan
    upload_put = platform_upload_path(team, birds)
    member = session_cookie(team.editor)
    stranger = session_cookie(UserFactory(email="nobody@elsewhere.test"))
    predictor = api_key_create(access=team.access("owner"), name="app", scopes=["predict"])[1]
    uploader = api_key_create(access=team.access("owner"), name="ci", scopes=["write"])[1]
    chunk = f"/w/acme/imports/{10**6}/files/0/chunks/0/"
    form_upload = f"/w/acme/projects/{birds.pk}/models/upload/"
    anonymous_routes = [
        ("PUT", "/api/webhooks/models/upload/not-a-token?exp=1&sig=x"),  # a forged upload URL
        ("POST", "/api/webhooks/training/metrics"),
        ("POST", "/api/v1/datasets/1/uploads"),  # the dataset upload API
        ("PUT", chunk),  # the resumable uploader's chunk
        ("POST", "/api/v1/models/1/predict"),
        ("POST", "/d/some-endpoint/predict"),
        ("POST", "/api/v1/trainer/jobs/1/events"),
        ("PUT", "/api/v1/trainer/jobs/1/attempts/1/files/best.pt?exp=9999999999&sig=x"),
        ("PUT", "/accounts/login/"),
        ("POST", "/billing/stripe/webhook"),
    ]
    with web_server(tmp_path) as web:
        for method, path in anonymous_routes:
            status, body = ask(web, method, path, HUGE)
            assert status == 413, (path, status, body)
            assert "is at most" in refusal_text(body), body
            # Without credentials a route takes a small body, however much it takes with them.
            if "stripe" not in path:
                assert ask(web, method, path, 65 * 1024)[0] == 413, path
                assert ask(web, method, path, 60 * 1024)[0] == 100, path
        assert kept(web) == []

        # Credentials that reach the route earn its own limit, and the plan's where it has one
        # (a live signed upload URL is its own credential).
        cases = [
            ("PUT", chunk, {"Cookie": member}, settings.DATASET_UPLOAD_CHUNK_BYTES),
            ("POST", "/w/acme/datasets/1/uploads/", {"Cookie": member}, MAX_FILE_LIST_BYTES),
            ("POST", form_upload, {"Cookie": member}, pro.max_model_upload_bytes + 64 * 1024),
            ("PUT", upload_put, {}, pro.max_model_upload_bytes),
            (
                "POST",
                "/api/v1/models/1/predict",
                {"Authorization": f"Bearer {predictor}"},
                settings.PREDICT_MAX_BODY_BYTES + 64 * 1024,
            ),
            (
                "POST",
                "/accounts/password/change/",
                {"Cookie": member},
                settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            ),
        ]
        for method, path, headers, limit in cases:
            assert ask(web, method, path, limit, **headers)[0] == 100, path
            status, body = ask(web, method, path, limit + 1, **headers)
            assert status == 413, (path, status, body)
            assert f"at most {size_text(limit)}" in refusal_text(body), body
        dataset = DatasetFactory(workspace=team.workspace)
        api_upload = f"/api/v1/datasets/{dataset.pk}/uploads"
        uploading = {"Authorization": f"Bearer {uploader}"}
        assert ask(web, "POST", api_upload, 10 * GIB, **uploading)[0] == 100
        status, body = ask(web, "POST", api_upload, 21 * GIB, **uploading)
        assert status == 413 and "the Pro plan" in refusal_text(body), body

        # Someone signed in whom the route does not reach gets no more than nobody.
        assert ask(web, "PUT", chunk, 1024 * 1024, Cookie=stranger)[0] == 413
        assert ask(web, "POST", form_upload, 1024 * 1024, Cookie=stranger)[0] == 413
        viewer = session_cookie(team.viewer)  # a member who may not upload
        assert ask(web, "PUT", chunk, 1024 * 1024, Cookie=viewer)[0] == 413
        # The upload URL of a run that has ended is answered as its view answers it, unread.
        TrainingJob.objects.filter(project=birds).update(state=JobState.CANCELED)
        status, body = ask(web, "PUT", upload_put, 1024 * 1024)
        assert status == 410 and "has ended" in refusal_text(body), body
        assert kept(web) == []


def answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def send_chunks(sock: socket.socket, total: int, size: int = 64 * 1024) -> int:
    """Send a chunked body of `total` bytes, or until the server answers or stops reading."""
    sent = 0
    try:
        while sent < total and not answered(sock):
            sock.sendall(b"%x\r\n" % size + b"k" * size + b"\r\n")
            sent += size
        if sent >= total:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_a_chunked_body_is_cut_off_at_its_limit(tmp_path, team):
    member = session_cookie(team.editor)
    chunk = f"/w/acme/imports/{10**6}/files/0/chunks/0/"
    with web_server(tmp_path) as web:
        for path, headers, limit in [
            ("/api/webhooks/models/upload/not-a-token", {}, 64 * 1024),
            ("/accounts/login/", {}, 64 * 1024),
            (chunk, {"Cookie": member}, settings.DATASET_UPLOAD_CHUNK_BYTES),
        ]:
            with connect(web) as sock:
                sock.sendall(head("PUT", path, Transfer_Encoding="chunked", **headers))
                sent = send_chunks(sock, 64 * 2**20)  # 64 MiB
                status, fields, body = answer(sock)
            assert status == 413, (path, status, body)
            assert fields["connection"] == "close"
            assert "this request sent more" in refusal_text(body), body
            # Cut off near its limit: what it had sent past it lies in the sockets' buffers.
            assert sent < limit + 16 * 2**20, (path, sent)
        # Within the limit the body is read and the view answers.
        with connect(web) as sock:
            sock.sendall(head("PUT", chunk, Transfer_Encoding="chunked", Cookie=member))
            assert send_chunks(sock, 2**20) == 2**20
            status = answer(sock)[0]
            assert status != 413 and status < 500, status  # the view's own answer
        assert kept(web) == []


def drip(web, first: bytes, results: list, index: int) -> None:
    """Send `first`, then a byte every 0.2 s, until the server answers."""
    with connect(web) as sock:
        sock.sendall(first)
        deadline = time.monotonic() + ANSWER_SECONDS
        while time.monotonic() < deadline:
            if select.select([sock], [], [], 0.2)[0]:
                results[index] = answer(sock)
                return
            with contextlib.suppress(OSError):
                sock.sendall(b"a")
        results[index] = (None, {}, b"no answer")


def test_slow_and_oversized_requests_get_their_answer_and_hold_nothing(tmp_path):
    env = {"REQUEST_HEADER_TIMEOUT_SECONDS": "1", "REQUEST_BODY_TIMEOUT_SECONDS": "1"}
    with web_server(tmp_path, **env) as web:
        heads = [b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "] * 10
        bodies = [head("POST", "/accounts/login/", Content_Length="4000") + b"a"] * 10
        results: list = [None] * 20
        drippers = [
            threading.Thread(target=drip, args=(web, first, results, i))
            for i, first in enumerate(heads + bodies)
        ]
        for dripper in drippers:
            dripper.start()
        # A good caller's page is served while they drip.
        page = urllib.request.urlopen(f"{web.url}/accounts/login/", timeout=ANSWER_SECONDS)
        assert page.status == 200
        for dripper in drippers:
            dripper.join()
        for status, _, body in results[:10]:
            assert status == 408 and b"headers did not arrive within 1 s" in body, body
        for status, _, body in results[10:]:
            assert status == 408 and b"arrived too slowly" in body, body

        # Headers past their cap are refused, not kept in memory as they grow.
        with connect(web) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                for _ in range(64):  # 4 MiB, or until the server answers
                    if answered(sock):
                        break
                    sock.sendall(b"b" * 64 * 1024)
            status, _, body = answer(sock)
        assert status == 431 and f"{MAX_HEAD_BYTES:,}" in body.decode(), body
        assert urllib.request.urlopen(f"{web.url}/accounts/login/").status == 200
        assert kept(web) == []


def test_uploads_at_once_are_capped_per_address_and_per_caller(tmp_path, team):
    editor, admin, owner = (session_cookie(team.user(r)) for r in ("editor", "admin", "owner"))
    chunk = f"/w/acme/imports/{10**6}/files/0/chunks/0/"
    declared = str(2**20)
    env = {
        **{"UPLOADS_PER_ADDRESS": "3", "UPLOADS_PER_CALLER": "2"},
        # Past the caps, no room for another MiB.
        **{"UPLOAD_BYTES_PER_ADDRESS": str(3 * 2**20), "UPLOAD_BYTES_PER_CALLER": str(2**21)},
    }
    with web_server(tmp_path, **env) as web, contextlib.ExitStack() as held:

        def start(cookie: str) -> tuple[int, bytes, socket.socket]:
            sock = held.enter_context(connect(web))
            sock.sendall(
                head("PUT", chunk, Content_Length=declared, Expect="100-continue", Cookie=cookie)
            )
            status, _, body = answer(sock)
            return status, body, sock

        first, second = start(editor), start(editor)
        assert first[0] == second[0] == 100  # both being received
        status, body, _ = start(editor)
        assert status == 429, body
        assert "2 uploads are already being received for these credentials" in body.decode()
        assert start(admin)[0] == 100  # the address's third
        status, body, _ = start(owner)
        assert status == 429 and "from this address" in body.decode(), body
        # Small bodies are no uploads: a page still answers.
        assert urllib.request.urlopen(f"{web.url}/accounts/login/").status == 200

        first[2].close()  # the editor gives up one upload: a place is free again
        for _ in range(50):
            status, body, sock = start(owner)
            if status == 100:
                break
            sock.close()
            time.sleep(0.1)
        assert status == 100, body


def test_more_uploads_than_the_caps_are_received_while_they_are_small_in_all(tmp_path, team):
    """A client predicting on many photos at once: past the caps on uploads at once, one more
    is received while all of them come to at most the byte budget, whoever sends it."""
    editor, admin = (session_cookie(team.user(r)) for r in ("editor", "admin"))
    chunk = f"/w/acme/imports/{10**6}/files/0/chunks/0/"
    env = {
        **{"UPLOADS_PER_ADDRESS": "2", "UPLOADS_PER_CALLER": "1"},
        **{"UPLOAD_BYTES_PER_ADDRESS": str(2**20), "UPLOAD_BYTES_PER_CALLER": str(600 * 2**10)},
    }
    with web_server(tmp_path, **env) as web, contextlib.ExitStack() as held:

        def start(cookie: str, size: int) -> tuple[int, bytes]:
            sock = held.enter_context(connect(web))
            sock.sendall(
                head("PUT", chunk, Content_Length=str(size), Expect="100-continue", Cookie=cookie)
            )
            status, _, body = answer(sock)
            return status, body

        photo = 200 * 2**10
        assert [start(editor, photo)[0] for _ in range(3)] == [100, 100, 100]  # 600 KB in all
        status, body = start(editor, photo)
        assert status == 429 and "for these credentials (up to" in body.decode(), body
        assert start(admin, photo)[0] == 100  # the address's 800 KB
        status, body = start(admin, 300 * 2**10)  # 1.1 MB from the address: past its budget
        assert status == 429 and "from this address" in body.decode(), body


def test_compose_puts_a_front_server_with_matching_limits_before_the_web(tmp_path):
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    proxy = services["proxy"]
    assert proxy["image"].startswith("nginx:")
    published = {name for name, service in services.items() if service.get("ports")}
    assert "web" not in published and "proxy" in published
    mount = next(v for v in proxy["volumes"] if v.endswith("/etc/nginx/conf.d/default.conf:ro"))
    conf = (ROOT / mount.split(":")[0]).read_text()
    address = proxy["networks"]["default"]["ipv4_address"]
    assert compose["x-app"]["environment"]["TRUSTED_PROXIES"] == address

    def seconds(directive: str) -> float:
        return float(re.search(rf"^\s*{directive} (\d+)s;", conf, re.M).group(1))

    assert seconds("client_header_timeout") == settings.REQUEST_HEADER_TIMEOUT_SECONDS
    assert seconds("client_body_timeout") == settings.REQUEST_BODY_TIMEOUT_SECONDS
    # nginx drops an idle connection to the web before uvicorn would (its --timeout-keep-alive
    # is 5 s), never sending on one uvicorn is closing.
    upstream = re.search(r"upstream kestrel_web \{(.*?)\}", conf, re.S).group(1)
    assert float(re.search(r"keepalive_timeout (\d+)s;", upstream).group(1)) < 5

    def body_limit(block: str) -> int:
        number, unit = re.search(r"client_max_body_size (\d+)([kmg]?);", block).groups()
        return int(number) * {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}[unit]

    server = conf[conf.index("server {") :]
    locations = dict(re.findall(r"location ~ (\S+) \{(.*?)\n    \}", server, re.S))
    default = body_limit(server.split("\n    location")[0])
    assert default == settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    fields = ("max_upload_bytes", "max_model_upload_bytes")
    largest = {field: max(plan[field] for plan in DEFAULT_PLANS) for field in fields}
    routes = {
        "/w/acme/imports/1/files/2/chunks/3/": settings.DATASET_UPLOAD_CHUNK_BYTES,
        "/w/acme/datasets/1/uploads/": MAX_FILE_LIST_BYTES,
        "/w/acme/datasets/1/upload/": largest["max_upload_bytes"] + 64 * 1024,
        "/api/v1/datasets/1/uploads": largest["max_upload_bytes"] + 64 * 1024,
        "/w/acme/projects/1/models/upload/": largest["max_model_upload_bytes"] + 64 * 1024,
        "/api/webhooks/models/upload/abc": largest["max_model_upload_bytes"],
        "/api/v1/trainer/jobs/1/attempts/2/files/best.pt": MAX_WEIGHTS_BYTES,
        "/api/v1/models/1/predict": settings.PREDICT_MAX_BODY_BYTES + 64 * 1024,
        "/d/endpoint/predict": settings.PREDICT_MAX_BODY_BYTES + 64 * 1024,
        "/api/v1/images/1/mask": MASK_MAX_BYTES,
    }
    for path, limit in routes.items():
        matched = [block for pattern, block in locations.items() if re.match(pattern, path)]
        assert len(matched) == 1, path
        # Streamed to the web, which checks credentials and plan before it keeps anything.
        assert "proxy_request_buffering off;" in matched[0], path
        assert body_limit(matched[0]) >= limit, path
        if "/predict" in path:  # many photos at once: the address's connections, inherited
            assert "limit_conn" not in matched[0], path
        else:
            assert "limit_conn kestrel_uploads" in matched[0], path
    assert re.search(r"limit_conn kestrel_uploads (\d+);", conf).group(1) == str(
        settings.UPLOADS_PER_ADDRESS
    )
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in conf  # replaced, never appended

    nginx = shutil.which("nginx")
    if nginx:  # where nginx is installed, it accepts the file as compose mounts it
        temps = "".join(
            f"{kind}_temp_path {tmp_path / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        wrapper = tmp_path / "nginx.conf"
        wrapper.write_text(
            f"events {{}}\nhttp {{\naccess_log off; {temps}\n"
            f"{conf.replace('web:8000', '127.0.0.1:9')}\n}}\n"
        )
        checked = subprocess.run(
            [nginx, "-t", "-q", "-e", "stderr", "-p", f"{tmp_path}/", "-c", str(wrapper)]
            + ["-g", f"pid {tmp_path / 'nginx.pid'};"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert checked.returncode == 0, checked.stderr
