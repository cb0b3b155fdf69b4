"""A web process keeps an API key's lookup for up to a second (deploy.api); a revoked key is
still refused by its very next call, in every web process, because revoking moves a counter in
the shared Redis that each call reads (workspaces.revocations)."""

import time

import pytest
from django.utils import timezone

from deploy.api import KEY_KEPT_SECONDS
from deploy.ratelimit import _redis
from tests.deploy.test_rate_limit_processes import _predict as predict_call
from tests.servers import app_server
from tests.training.factories import trained_model_row
from workspaces.models import ApiKey
from workspaces.services.keys import api_key_create, api_key_revoke

pytestmark = pytest.mark.django_db(transaction=True)


def _predict(base: str, model_id: int, raw_key: str) -> int:
    return predict_call(base, model_id, raw_key)[0]


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
