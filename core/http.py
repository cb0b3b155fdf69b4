"""What every view shares: the request type htmx views are written against, paging, and URLs
for many rows of one route."""

from collections.abc import Callable

from django.core.paginator import Page, Paginator
from django.http import HttpRequest
from django.urls import reverse
from django_htmx.middleware import HtmxDetails

_SENTINEL = 987654321

PAGE_SIZE = 25


class HtmxHttpRequest(HttpRequest):  # for type hints, as django-htmx recommends
    htmx: HtmxDetails


def page_of(request: HttpRequest, queryset, per_page: int = PAGE_SIZE) -> Page:
    return Paginator(queryset, per_page).get_page(request.GET.get("page"))


def reverse_each(name: str, *args, suffix: str = "") -> Callable[[int], str]:
    """`reverse(name, args=(*args, pk)) + suffix` for many pks, resolved once: a page of 60
    tiles with three links each spends more on reverse() than on its queries otherwise. The
    varying argument must be the route's last, an int."""
    head, _, tail = reverse(name, args=(*args, _SENTINEL)).rpartition(str(_SENTINEL))
    return lambda pk: f"{head}{int(pk)}{tail}{suffix}"
