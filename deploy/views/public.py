"""A public model's try-it page (the demo model): anyone signed in may run it on an image of
their own or on the public dataset's pictures. Nothing else of its workspace is shown."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.http import HtmxHttpRequest
from deploy.selectors import model_public_get
from deploy.views.models import try_context


@login_required
@require_GET
def public_model_try(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    model = model_public_get(pk=pk)
    return render(request, "deploy/model_try.html", {"public": True, **try_context(request, model)})
