"""Parts of a page that an app higher in the layering (docs/architecture.md) adds to a page of
an app below it, so the lower app never imports the higher one.

The page names its slot and merges `page_parts(slot, **what_it_has)` into its template's
context; each app that adds to it registers, in its AppConfig.ready(), a provider under the
context name its part of the template reads. The slots:

- "billing_page" (billing.views.workspace_billing; access=, account=): training adds
  `job_costs`, deploy adds `inference`.
- "public_dataset_page" (datasets.views.versions.public_dataset; dataset=): deploy adds
  `public_models`.
"""

from collections import defaultdict
from collections.abc import Callable

_parts: dict[str, dict[str, Callable[..., object]]] = defaultdict(dict)


def page_part_register(slot: str, name: str, provider: Callable[..., object]) -> None:
    """On the `slot` page, the template's `name` is `provider(**what_the_page_has)`."""
    _parts[slot][name] = provider


def page_parts(slot: str, **kwargs) -> dict[str, object]:
    return {name: provider(**kwargs) for name, provider in _parts[slot].items()}
