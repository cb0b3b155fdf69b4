from django.core.exceptions import PermissionDenied
from django.http import Http404
from ninja import NinjaAPI

from annotation.api import router as annotation_router
from billing.api import router as billing_router
from config.errors import api_errors_install
from core.errors import ServiceError
from datasets.api import router as datasets_router
from datasets.api_uploads import router as uploads_router
from datasets.api_versions import router as versions_router
from deploy.api import endpoints
from deploy.api import router as deploy_router
from sweeps.api import router as sweeps_router
from training.api import router as training_router
from training.remote import router as remote_router
from training.trainer_events import router as trainer_router
from workspaces.api import ApiKeyAuth, session_auth
from workspaces.api import router as workspaces_router

api = NinjaAPI(
    title="Kestrel API",
    version="1",
    description=(
        "Send `Authorization: Bearer ul_…` with a workspace API key, or use the browser "
        "session. A key reaches only its own workspace and only what its scopes allow."
    ),
    auth=[ApiKeyAuth(), session_auth],
    urls_namespace="api",
)
api_errors_install(api)
api_errors_install(endpoints)  # the dedicated endpoints (/d/<slug>/predict) answer alike
api.add_router("/", workspaces_router)
api.add_router("/", datasets_router)
api.add_router("/", uploads_router)
api.add_router("/", versions_router)
api.add_router("/", training_router)
api.add_router("/", billing_router)
api.add_router("/", trainer_router)
api.add_router("/", remote_router)
api.add_router("/", annotation_router)
api.add_router("/", deploy_router)
api.add_router("/", sweeps_router)


@api.exception_handler(PermissionDenied)
def _permission_denied(request, exc):
    return api.create_response(request, {"detail": str(exc) or "Forbidden."}, status=403)


@api.exception_handler(Http404)
def _not_found(request, exc):
    return api.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@api.exception_handler(ServiceError)
def _service_error(request, exc):
    return api.create_response(request, {"detail": str(exc)}, status=400)
