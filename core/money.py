"""Money: credits are kept as integer micro-credits, and amounts in credits (a price, a form's
figure, seconds of a machine) become micro-credits by one rule, here, so a figure shown and the
figure held or charged for it are the same number.

The rule: whole micro-credits, a fraction dropped (rounded toward zero). A hold or a charge
never exceeds the exact price, and a sum of slices is never more than its whole."""

from decimal import ROUND_DOWN, Decimal

MICRO = 1_000_000  # micro-credits in one credit; one credit is one US dollar
SECONDS_PER_HOUR = 3600


def _decimal(amount) -> Decimal:
    if isinstance(amount, Decimal):
        return amount
    if isinstance(amount, bool):
        raise TypeError("An amount is a number, not a truth value.")
    return Decimal(str(amount))  # a float as it reads (0.1 is 0.1), not its binary expansion


def to_micro(credits) -> int:
    """Credits (Decimal, int, float or numeric string) as whole micro-credits."""
    return int((_decimal(credits) * MICRO).to_integral_value(rounding=ROUND_DOWN))


def from_micro(micro: int) -> Decimal:
    """Micro-credits as credits, exactly."""
    return Decimal(int(micro)) / MICRO


def per_hour_to_micro(seconds, hourly_price) -> int:
    """What `seconds` of something priced `hourly_price` credits an hour cost, in micro-credits."""
    return to_micro(_decimal(seconds) * _decimal(hourly_price) / SECONDS_PER_HOUR)
