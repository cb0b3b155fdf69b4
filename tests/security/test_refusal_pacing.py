"""A client address whose predict calls keep being refused is answered more slowly
(core.refusal_pacing): past REFUSALS_FREE refusals within the window each one is held, and says
so, and its calls are answered PACED_CALLS_AT_ONCE at a time; calls that are not refused, other
routes, and other addresses are not held.

Against the real web server (`python -m config.web`, as `make run` serves it), where the
pacing sits in front of the request guard and the predict route; and its window on its own.
"""

import http.client
import io
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from PIL import Image

from core.refusal_pacing import MAX_ADDRESSES, RefusalPacing
from tests.security.test_body_limits import web_server
from tests.training.factories import trained_model_row
from workspaces.services.keys import api_key_create

PAUSE = 0.4


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (120, 30, 200)).save(out, format="JPEG")
    return out.getvalue()


def form(data: bytes) -> tuple[bytes, dict]:
    """A multipart body with `data` as its file, and its Content-Type."""
    request = httpx.Request("POST", "http://x/", files={"file": ("x.jpg", data, "image/jpeg")})
    return request.read(), {"Content-Type": request.headers["content-type"]}


def post(
    web, path: str, body: bytes, source: str = "127.0.0.1", **headers: str
) -> tuple[int, dict, float]:
    """One call on a connection of its own, from address `source`: status, headers, seconds
    until the answer."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", web.port, timeout=30, source_address=(source, 0)
    )
    try:
        started = time.monotonic()
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        fields: dict[str, str] = {}
        for name, value in response.getheaders():  # a header sent twice: one list (RFC 9110)
            fields[name.lower()] = (
                f"{fields[name.lower()]}, {value}" if name.lower() in fields else value
            )
        return response.status, fields, time.monotonic() - started
    finally:
        connection.close()


def paced(fields: dict) -> bool:
    return "paced;dur=" in fields.get("server-timing", "")


def queued(fields: dict) -> bool:
    return "queued;dur=" in fields.get("server-timing", "")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_refused_predict_calls_past_the_free_ones_are_held_and_others_are_not(tmp_path, team):
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    _, raw = api_key_create(access=team.access("owner"), name="k", scopes=["predict"])
    image, multipart = form(jpeg())
    bad, _ = form(b"not an image")
    key = {"Authorization": f"Bearer {raw}", **multipart}
    too_big = {**key, "Content-Length": str(10**9)}
    predict = f"/api/v1/models/{model.pk}/predict"
    with web_server(
        tmp_path,
        REFUSALS_FREE="3",
        REFUSALS_WINDOW_SECONDS="600",
        REFUSAL_PAUSE_SECONDS=str(PAUSE),
        INFERENCE_URL="http://127.0.0.1:9",  # no model server: a good image is answered 503
    ) as web:
        # The first three refusals at once, whatever refused them: the view, the request guard.
        first = [
            post(web, predict + "?conf=-1", image, **key),
            post(web, predict, bad, **key),
            post(web, predict, b"k" * 100, **too_big),
        ]
        assert [status for status, _, _ in first] == [400, 400, 413], first
        assert not any(paced(fields) for _, fields, _ in first), first

        # A call that is not refused is never held, nor counted.
        status, fields, _ = post(web, predict, image, **key)
        assert status == 503 and not paced(fields), (status, fields)

        # Past them, each refusal is held and says so: the view's, the guard's, an unknown
        # endpoint's, a caller without credentials.
        for path, body, headers, expected in [
            (predict + "?iou=7", image, key, 400),
            (predict, b"k" * 100, too_big, 413),
            ("/d/no-such-endpoint/predict", image, key, 404),
            (predict, image, multipart, 401),
        ]:
            status, fields, took = post(web, path, body, **headers)
            assert status == expected, (path, status, fields)
            assert paced(fields) and f"dur={int(PAUSE * 1000)}" in fields["server-timing"], fields
            assert took >= PAUSE, (path, took)

        # Still not held: a call that is not refused, and refusals on other routes.
        status, fields, _ = post(web, predict, image, **key)
        assert status == 503 and not paced(fields), (status, fields)
        status, fields, _ = post(web, "/api/v1/workspaces/nowhere/projects", b"{}", **key)
        assert 400 <= status < 500 and not paced(fields), (status, fields)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_an_address_past_its_free_refusals_is_answered_a_few_calls_at_a_time(tmp_path, team):
    """Holding each refusal paces one connection; a client with many connections at once is
    paced by answering its calls a few at a time. Other addresses do not wait."""
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    _, raw = api_key_create(access=team.access("owner"), name="k", scopes=["predict"])
    bad, multipart = form(b"not an image")
    key = {"Authorization": f"Bearer {raw}", **multipart}
    predict = f"/api/v1/models/{model.pk}/predict"
    at_once = 6
    with web_server(
        tmp_path,
        REFUSALS_FREE="2",
        REFUSALS_WINDOW_SECONDS="600",
        REFUSAL_PAUSE_SECONDS=str(PAUSE),
        PACED_CALLS_AT_ONCE="1",
        INFERENCE_URL="http://127.0.0.1:9",
    ) as web:
        # At once while nothing was refused yet: not queued.
        with ThreadPoolExecutor(at_once) as pool:
            first = list(pool.map(lambda _: post(web, predict, bad, **key), range(2)))
        assert [status for status, _, _ in first] == [400, 400], first
        assert not any(queued(fields) or paced(fields) for _, fields, _ in first), first

        # Past its free refusals: six calls at once are answered one after another, each held.
        started = time.monotonic()
        with ThreadPoolExecutor(at_once) as pool:
            calls = list(pool.map(lambda _: post(web, predict, bad, **key), range(at_once)))
            # Meanwhile another address is answered at once, neither held nor queued.
            time.sleep(PAUSE / 2)
            status, fields, took = post(web, predict, bad, source="127.0.0.2", **key)
        assert status == 400 and not queued(fields) and not paced(fields), fields
        assert took < PAUSE, took
        assert all(status == 400 and paced(fields) for status, fields, _ in calls), calls
        assert sum(queued(fields) for _, fields, _ in calls) >= at_once - 1, calls
        assert time.monotonic() - started >= at_once * PAUSE

        # Once none of its calls is in, none waits for a gate that is gone.
        status, fields, _ = post(web, predict, bad, **key)
        assert status == 400 and paced(fields) and not queued(fields), fields


def test_the_window_frees_an_address_and_addresses_are_counted_apart(settings):
    settings.REFUSALS_FREE = 2
    settings.REFUSALS_WINDOW_SECONDS = 10
    settings.REFUSAL_PAUSE_SECONDS = 0.25
    pacing = RefusalPacing(app=None, paths=None)
    assert [pacing.pause_for("a", now=t) for t in (0, 1, 2, 3)] == [0, 0, 0.25, 0.25]
    assert pacing.pause_for("b", now=3) == 0  # another address has its own count
    assert [pacing.pause_for("a", now=t) for t in (10, 11, 12)] == [0, 0, 0.25]  # a new window

    # Addresses are forgotten once their window ends, so a stranger cycling through
    # addresses cannot grow the table past its bound.
    for n in range(MAX_ADDRESSES * 2):
        pacing.pause_for(f"10.0.{n // 256}.{n % 256}", now=100 + n / 1000)
    assert len(pacing.seen) <= MAX_ADDRESSES
    assert pacing.pause_for("10.0.0.1", now=200) == 0
