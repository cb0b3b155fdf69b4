"""The shared inference API (under /api/v1/), and dedicated endpoints (/d/<slug>/predict).

Both answer in the hosted Ultralytics Platform's shape, so its users can switch by changing
the URL. A key needs the predict scope; the browser session works too (the try-it page)."""

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from ninja import NinjaAPI, Router
from ninja.security import django_auth

from deploy.models import Deployment, DeploymentState
from deploy.predict import PredictRefused, predict_forward
from deploy.selectors import models_for_predict
from workspaces.api import ApiKeyAuth
from workspaces.permissions import Perm
from workspaces.selectors import workspace_access_for_caller

router = Router(tags=["inference"])


def _access(request: HttpRequest, workspace):
    access = workspace_access_for_caller(auth=request.auth, user=request.user, slug=workspace.slug)
    access.require(Perm.PREDICT)
    return access


@router.post("/models/{model_id}/predict")
def model_predict(request: HttpRequest, model_id: int):
    """Run a model of your workspace on one image: multipart `file` (or JSON base64 `image`),
    with `conf` (0.25), `iou` (0.7), `imgsz` (32–1280, default the model's) and `max_det`."""
    model = models_for_predict().filter(pk=model_id).first()
    if model is None:
        raise Http404("No such model.")
    access = _access(request, model.workspace)
    return predict_forward(
        request=request, access=access, model=model, server_url=settings.INFERENCE_URL
    )


# Dedicated endpoints: their own URL space, the same authentication as the API.
endpoints = NinjaAPI(
    title="Kestrel dedicated endpoints",
    version="1",
    auth=[ApiKeyAuth(), django_auth],
    urls_namespace="endpoints",
    docs_url=None,
    openapi_url=None,
)


@endpoints.post("/{slug}/predict")
def deployment_predict(request: HttpRequest, slug: str):
    """The deployment's model on one image; the URL stays when the model behind it changes."""
    deployment = (
        Deployment.objects.select_related("workspace")
        .only("id", "slug", "state", "port", "desired_running", "model_id", "workspace__slug")
        .filter(slug=slug)
        .first()
    )
    if deployment is None:
        raise Http404("No such deployment.")
    access = _access(request, deployment.workspace)
    if deployment.state != DeploymentState.RUNNING or not deployment.port:
        return PredictRefused(
            503,
            f"The deployment is {deployment.get_state_display().lower()}; "
            + ("start it on its page." if not deployment.desired_running else "try shortly."),
        ).response()
    return predict_forward(
        request=request,
        access=access,
        model=models_for_predict().get(pk=deployment.model_id),
        server_url=f"http://{settings.DEPLOY_HOST}:{deployment.port}",
        deployment_id=deployment.pk,
    )


@endpoints.exception_handler(Http404)
def _not_found(request, exc):
    return endpoints.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@endpoints.exception_handler(PermissionDenied)
def _denied(request, exc):
    return endpoints.create_response(request, {"detail": str(exc) or "Forbidden."}, status=403)
