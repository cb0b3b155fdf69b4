"""Authorisation-matrix rows for the Ultralytics Platform webhooks (training.platform_webhooks).

They take a workspace API key only, never a session: a person signed in (any role, or a
stranger) without a key is 401, which the stock client takes for a key that is not a key. The
signed upload PUT takes its URL's signature only: 403 for everyone without it. What a key may
reach (scope 403, foreign or unknown 404) is tests/training/test_platform_webhooks.py's."""

from tests.authz import Row

ROUTES = [
    Row("platform_training_metrics", "post", None, 401, anonymous=401, stranger=401),
    Row("platform_model_upload", "post", None, 401, anonymous=401, stranger=401),
    Row(
        "platform_model_upload_put",
        "put",
        None,
        403,
        {"token": "not-a-signed-token"},
        anonymous=403,
        stranger=403,
    ),
]
