"""Authorisation-matrix rows for the Models page, the try-it page and deleting a model
(tests/test_authz_matrix.py). @spare_model is served by no deployment and used by no job, so
whoever may delete it does (302 to the Models page). @public_model is public (the demo's kind)."""

from tests.authz import Row, _ws
from tests.training.factories import trained_model_row

_SPARE = {"pk": "@spare_model"}

ROUTES = [
    Row("model_list", "get", "viewer", 200, _ws()),
    Row("model_list", "get", "viewer", 200, _ws(), {"task": "detect", "sort": "metric"}),
    # Trying a model calls it: the predict permission, as the API asks of the page's requests.
    Row("model_try", "get", "editor", 200, _ws(**_SPARE)),
    Row("model_delete", "get", "editor", 200, _ws(**_SPARE)),
    Row("model_delete", "post", "editor", 302, _ws(**_SPARE)),
    # The shared API's collection rule for a model (deploy.collection): editors.
    Row(
        "model_collection",
        "post",
        "editor",
        302,
        _ws(**_SPARE),
        {"conf_min": "0.2", "conf_max": "0.6", "sample_rate": "1", "daily_cap": "10"},
    ),
    # A public model's try-it page: anyone signed in; a private model has none, even for its team.
    Row("public_model_try", "get", None, 200, {"pk": "@public_model"}, stranger=200),
    Row("public_model_try", "get", None, 404, _SPARE),
]


def models_ctx(values: dict) -> dict:
    model = trained_model_row(workspace=values["team"].workspace, class_names=["bird"])
    public = trained_model_row(workspace=values["team"].workspace, class_names=["bird"])
    public.is_public = True
    public.save(update_fields=["is_public"])
    return {"spare_model": model.pk, "public_model": public.pk}


CTX = [models_ctx]
