"""A model's try-it page: run it on an image from the browser, with the API call that does the
same (curl, Python). Its workspace's members see it here; a public model's is
deploy.views.public."""

from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from core.http import HtmxHttpRequest
from deploy.selectors import model_public_samples
from training import selectors as training_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

# What the try-it page offers to run at; the model's own training size is added.
TRY_IMAGE_SIZES = (320, 480, 640, 960, 1280)


def _snippets(predict_url: str) -> dict[str, str]:
    curl = (
        f"curl -X POST {predict_url} \\\n"
        '  -H "Authorization: Bearer $KESTREL_API_KEY" \\\n'
        "  -F file=@image.jpg \\\n"
        "  -F conf=0.25"
    )
    python = f"""import os

import requests

response = requests.post(
    "{predict_url}",
    headers={{"Authorization": f"Bearer {{os.environ['KESTREL_API_KEY']}}"}},
    files={{"file": open("image.jpg", "rb")}},
    data={{"conf": 0.25}},
    timeout=60,
)
response.raise_for_status()
for result in response.json()["images"][0]["results"]:
    print(result["name"], round(result["confidence"], 2), result.get("box"))"""
    return {"curl": curl, "python": python}


def try_context(request: HtmxHttpRequest, model) -> dict:
    """What the try-it page shows of `model`: for its workspace, and for a public model
    (deploy.views.public)."""
    predict_path = reverse("api:model_predict", kwargs={"model_id": model.pk})
    predict_url = request.build_absolute_uri(predict_path)
    return {
        "model": model,
        "predict_path": predict_path,
        "predict_url": predict_url,
        "snippets": _snippets(predict_url),
        "image_sizes": sorted({*TRY_IMAGE_SIZES, model.imgsz}),
        "samples": model_public_samples(model=model),
    }


@workspace_view(Perm.PREDICT)
@require_GET
def model_try(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = training_selectors.model_get(workspace=access.workspace, pk=pk)
    return render(
        request, "deploy/model_try.html", {"access": access, **try_context(request, model)}
    )
