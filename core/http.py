"""What every view shares: the request type htmx views are written against, and paging."""

from django.core.paginator import Page, Paginator
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails

PAGE_SIZE = 25


class HtmxHttpRequest(HttpRequest):  # for type hints, as django-htmx recommends
    htmx: HtmxDetails


def page_of(request: HttpRequest, queryset, per_page: int = PAGE_SIZE) -> Page:
    return Paginator(queryset, per_page).get_page(request.GET.get("page"))
