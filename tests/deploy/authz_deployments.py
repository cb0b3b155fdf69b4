"""Authorisation-matrix rows for dedicated endpoint pages and the shared inference API
(tests/test_authz_matrix.py). @deployment is stopped (so it can be started or deleted) and
serves @deploy_model; the predict call is let in, then refused for having no image (400)."""

from deploy.models import Deployment, DeploymentState
from tests.authz import ApiRow, Row, _ws
from tests.training.factories import trained_model_row

ROUTES = [
    Row("deployment_list", "get", "viewer", 200, _ws()),
    Row("deployment_create", "post", "editor", 302, _ws(), {"model": "@deploy_model"}),
    Row("deployment_detail", "get", "viewer", 200, _ws(pk="@deployment")),
    Row("deployment_start", "post", "editor", 302, _ws(pk="@deployment")),
    Row("deployment_stop", "post", "editor", 302, _ws(pk="@deployment")),
    Row(
        "deployment_swap", "post", "editor", 302, _ws(pk="@deployment"), {"model": "@deploy_model"}
    ),
    Row("deployment_delete", "post", "editor", 302, _ws(pk="@deployment")),
    Row(
        "deployment_collection",
        "post",
        "editor",
        302,
        _ws(pk="@deployment"),
        {"conf_min": "0.2", "conf_max": "0.6", "sample_rate": "1", "daily_cap": "10"},
    ),
]

API = [
    ApiRow(
        "/api/v1/models/{model_id}/predict",
        "post",
        "editor",
        "predict",
        400,
        {},
        ids={"model_id": "@deploy_model"},
    ),
]


def deployments_ctx(values: dict) -> dict:
    model = trained_model_row(workspace=values["team"].workspace, class_names=["bird"])
    deployment = Deployment.objects.create(
        workspace=model.workspace,
        model=model,
        name="Birds live",
        slug="birds-live-abc123",
        desired_running=False,
        state=DeploymentState.STOPPED,
    )
    return {"deployment": deployment.pk, "deploy_model": model.pk}


CTX = [deployments_ctx]
