"""Parts of a page that an app higher in the layering (docs/architecture.md) adds to a page of
an app below it, so the lower app never imports the higher one.

The page names its slot and merges `page_parts(slot, **what_it_has)` into its template's
context; config/pages.py registers, under a name, each provider that adds to it: a function of
the page's keyword arguments returning context entries. The slots:

- "billing_page" (billing.views.workspace_billing; access=, account=): training adds
  `job_costs`, deploy adds `inference`.
- "public_dataset_page" (datasets.views.versions.public_dataset; dataset=): deploy adds
  `public_models`.
- "model_page" (training.views.models.model_detail; access=, model=): deploy adds its exports
  card (`exports`, `export_formats`, `exports_active`, `can_export`), evaluations its card
  (`evaluations`, `can_evaluate`).
"""

from collections import defaultdict
from collections.abc import Callable

_parts: dict[str, dict[str, Callable[..., dict]]] = defaultdict(dict)


def page_part_register(slot: str, name: str, provider: Callable[..., dict]) -> None:
    """On the `slot` page, `provider(**what_the_page_has)` adds context entries. Registering
    the same name again replaces it."""
    _parts[slot][name] = provider


def page_parts(slot: str, **kwargs) -> dict:
    context: dict = {}
    for provider in _parts[slot].values():
        context.update(provider(**kwargs))
    return context
