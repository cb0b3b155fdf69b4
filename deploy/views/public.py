"""A public model's try-it page (the demo model): anyone signed in may run it on an image of
their own or on the public dataset's pictures. Nothing else of its workspace is shown."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.http import HtmxHttpRequest
from deploy.selectors import collection_rules_on, model_public_get
from deploy.views.models import try_context


@login_required
@require_GET
def public_model_try(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    model = model_public_get(pk=pk)
    context = {
        "public": True,
        # Said to the people trying it: their images may be kept (deploy.collection).
        "collecting": collection_rules_on().filter(model=model, deployment=None).exists(),
        **try_context(request, model),
    }
    return render(request, "deploy/model_try.html", context)
