"""A predict grant kept (config.body_limits.BodyLimits.kept).

Nearly every photo is over the anonymous body limit, so each predict call of a busy key had its
credentials looked up twice: by the request guard, on a thread, to admit the body, and by the
view's one lookup. The guard now keeps a predict grant as long as the view keeps a lookup,
found by the very credentials it was earned with, and gives it again with no query. Only the
body's size rides on it: the view still checks the caller on every call (tests/deploy,
tests/security)."""

import time

import pytest
from django.test import Client

from config import body_limits
from config.body_limits import BodyLimits
from core.table_changes import tables_reading_note
from workspaces.services.keys import api_key_create, api_key_revoke

pytestmark = pytest.mark.django_db


def scope(path: str, **headers: str) -> dict:
    return {
        "type": "http",
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "query_string": b"",
    }


@pytest.fixture
def key(team) -> str:
    return api_key_create(access=team.access("owner"), name="app", scopes=["predict"])[1]


def session(user) -> str:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def test_a_predict_grant_is_given_again_without_a_query(key, django_assert_num_queries):
    limits = BodyLimits()
    call = scope("/api/v1/models/7/predict", Authorization=f"Bearer {key}")
    assert limits.kept(call) is None  # never checked here: the guard looks on a thread
    earned = limits.granted(call)
    assert earned.limit > body_limits.ANONYMOUS_BODY_BYTES and earned.caller.startswith("key:")
    with django_assert_num_queries(0):
        assert limits.kept(call) == earned
        # Any predict route: the grant is the same on each (PREDICT_MAX_BODY_BYTES).
        assert limits.kept(scope("/d/shop/predict", Authorization=f"Bearer {key}")) == earned


def test_only_the_same_credentials_on_a_predict_route_find_it(team, key):
    limits = BodyLimits()
    member = session(team.editor)
    limits.granted(scope("/api/v1/models/7/predict", Authorization=f"Bearer {key}"))
    limits.granted(scope("/api/v1/models/7/predict", Cookie=member))
    assert limits.kept(scope("/api/v1/models/7/predict", Cookie=member)) is not None
    for other in (
        scope("/api/v1/models/7/predict", Authorization=f"Bearer {key}x"),
        scope("/api/v1/models/7/predict", Authorization=f"Bearer {key}", Cookie=member),
        scope("/api/v1/models/7/predict", Cookie=member + "x"),
        scope("/api/v1/models/7/predict"),  # none shown
        scope("/api/v1/datasets/1/uploads", Authorization=f"Bearer {key}"),  # not predict
        scope("/w/acme/datasets/1/upload/", Cookie=member),
    ):
        assert limits.kept(other) is None, other


def test_credentials_that_earned_nothing_are_not_kept(team, key):
    limits = BodyLimits()
    bogus = scope("/api/v1/models/7/predict", Authorization="Bearer ul_" + "0" * 40)
    assert limits.granted(bogus).limit == body_limits.ANONYMOUS_BODY_BYTES
    assert limits.kept(bogus) is None
    revoked = api_key_create(access=team.access("owner"), name="old", scopes=["predict"])
    api_key_revoke(access=team.access("owner"), key=revoked[0])
    call = scope("/d/shop/predict", Authorization=f"Bearer {revoked[1]}")
    assert limits.granted(call).limit == body_limits.ANONYMOUS_BODY_BYTES
    assert limits.kept(call) is None


def test_a_kept_grant_lapses(key, settings):
    limits = BodyLimits()
    call = scope("/api/v1/models/7/predict", Authorization=f"Bearer {key}")
    settings.PREDICT_KEY_KEPT_SECONDS = 0.2
    limits.granted(call)
    assert limits.kept(call) is not None
    time.sleep(0.25)
    assert limits.kept(call) is None


def test_kept_grants_are_dropped_when_a_call_sees_a_table_change(key, settings):
    """A predict call that reads the tables' tokens (deploy.api) and finds one moved since the
    last reading in this process drops the grants too: a key revoked meanwhile is looked up
    again by the guard at its next call, before its body is read."""
    settings.PREDICT_KEY_KEPT_SECONDS = 120
    limits = BodyLimits()
    call = scope("/api/v1/models/7/predict", Authorization=f"Bearer {key}")
    tables_reading_note((b"one",))
    limits.granted(call)
    tables_reading_note((b"one",))  # the same reading: nothing changed
    assert limits.kept(call) is not None
    tables_reading_note((b"two",))
    assert limits.kept(call) is None
