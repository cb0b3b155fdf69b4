"""How training times and costs read on a page."""

from decimal import ROUND_HALF_UP, Decimal

from django import template

from core.money import from_micro

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """4 s, 12 min 05 s, 3 h 07 min; — when there is no time (never started)."""
    if seconds is None:
        return "—"
    total = max(0, round(float(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@register.filter
def dollars(amount) -> str:
    """$1.24, or < $0.01 for a run that cost less than a cent; — when unknown."""
    if amount is None:
        return "—"
    cents = Decimal(amount).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    if cents == 0 and amount > 0:
        return "< $0.01"
    return f"${cents:,}"


@register.filter(name="from_micro")
def from_micro_filter(micro) -> Decimal | None:
    """Micro-credits as credits (one credit is one US dollar), for `dollars`."""
    return None if micro is None else from_micro(micro)
