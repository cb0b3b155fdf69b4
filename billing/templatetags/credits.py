from django import template

from billing.ledger import credits_format

register = template.Library()


@register.filter
def credits(micro: int | None) -> str:
    """Micro-credits shown as credits: 1234500 → "1.2345", 5000000 → "5.00"."""
    return "" if micro is None else credits_format(micro)
