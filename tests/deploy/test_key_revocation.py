"""A web process keeps an API key's lookup for up to a second (deploy.api); a revoked key is
still refused by its very next call, in every web process, because revoking moves a counter in
the shared Redis that each call reads (workspaces.revocations)."""

import io
import time
import urllib.error
import urllib.request
import uuid

import pytest
from django.utils import timezone
from PIL import Image as PILImage

from deploy.api import KEY_KEPT_SECONDS
from deploy.ratelimit import _redis
from tests.servers import app_server
from tests.training.factories import trained_model_row
from workspaces.models import ApiKey
from workspaces.services.keys import api_key_create, api_key_revoke

pytestmark = pytest.mark.django_db(transaction=True)


def _jpeg() -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (32, 32), (10, 200, 30)).save(out, format="JPEG")
    return out.getvalue()


def _predict(base: str, model_id: int, raw_key: str) -> int:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.jpg"\r\n'
            "Content-Type: image/jpeg\r\n\r\n"
        ).encode()
        + _jpeg()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        f"{base}/api/v1/models/{model_id}/predict",
        data=body,
        headers={
            "Authorization": f"Bearer {raw_key}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_revoked_key_is_refused_by_its_next_call_in_every_web_process(team):
    for key in _redis().scan_iter("kestrel:ratelimit:*"):
        _redis().delete(key)
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    owner = team.access("owner")
    # No model server: an admitted call is 503, a refused key 401.
    with (
        app_server(INFERENCE_URL="http://127.0.0.1:9") as a,
        app_server(INFERENCE_URL="http://127.0.0.1:9") as b,
    ):
        # The lookup is kept: a key revoked behind the service's back (no counter moved) still
        # passes while it is kept, and is refused once it lapses.
        key, raw = api_key_create(access=owner, name="kept", scopes=["predict"])
        assert _predict(a, model.pk, raw) == 503
        kept_at = time.monotonic()
        ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
        status = _predict(a, model.pk, raw)
        if time.monotonic() - kept_at < KEY_KEPT_SECONDS * 0.8:  # a slow machine: not provable
            assert status == 503
        time.sleep(KEY_KEPT_SECONDS + 0.2)
        assert _predict(a, model.pk, raw) == 401

        # Revoked as a person does it: refused at once by both processes, each of which had
        # just kept the key.
        key, raw = api_key_create(access=owner, name="revoked", scopes=["predict"])
        assert [_predict(a, model.pk, raw), _predict(b, model.pk, raw)] == [503, 503]
        api_key_revoke(access=owner, key=key)
        assert [_predict(a, model.pk, raw), _predict(b, model.pk, raw)] == [401, 401]
