"""SkyPilot's catalog price beside the admin's price of a cloud GPU type.

SkyPilot's API server downloads its clouds' price catalogs at run time (kept in
~/.sky/catalogs); a first read takes seconds, and the server may be away. So the admin page
never waits on it: it shows what the cache holds and, when the cache holds nothing yet, reads
the catalog in a thread of its own for the next look. Nothing here blocks a job or a page.
"""

import hashlib
import json
import threading
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache

import training.providers.sky_sdk as sky_sdk
from training.models import GpuType
from training.providers.base import ProviderError
from training.providers.skypilot import infras_of
from training.providers.skypilot_options import options_problems

CACHE_SECONDS = 3600  # catalogs change about daily
FAILED_SECONDS = 300  # an unreachable catalog is asked again after this
_reading: set[str] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class CatalogPrice:
    cheapest: sky_sdk.Offer | None  # on-demand
    cheapest_spot: sky_sdk.Offer | None
    offers: int
    error: str = ""


def type_options(gpu: GpuType) -> dict:
    return gpu.provider_options or settings.TRAINING_SKYPILOT_TYPES.get(gpu.slug) or {}


def _places(options: dict) -> list[tuple[str, str]]:
    """(cloud or "*", region or "") the options allow; [] allows every one."""
    places = []
    for infra in infras_of(options):
        parts = infra.lower().split("/")
        places.append((parts[0], parts[1] if len(parts) > 1 else ""))
    return places


def _allowed(offer: sky_sdk.Offer, places: list[tuple[str, str]]) -> bool:
    cloud, region = offer.cloud.lower(), offer.region.lower()
    return not places or any(c in ("*", cloud) and (not r or r == region) for c, r in places)


def _key(options: dict) -> str:
    wanted = {k: options.get(k) for k in ("accelerators", "count", "infra", "clouds", "regions")}
    digest = hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:24]
    return f"skypilot-catalog:1:{digest}"


def catalog_read(options: dict) -> CatalogPrice:
    """Ask SkyPilot now (seconds) and keep the answer, or why there is none, in the cache."""
    places = _places(options)
    clouds = sorted({c for c, _ in places})
    try:
        found = sky_sdk.offers(
            str(options["accelerators"]),
            int(options.get("count", 1)),
            None if not clouds or "*" in clouds else clouds,
        )
    except ProviderError as exc:
        price = CatalogPrice(None, None, 0, error=str(exc))
        cache.set(_key(options), price, FAILED_SECONDS)
        return price
    found = [offer for offer in found if _allowed(offer, places)]
    priced = [o for o in found if o.price is not None]
    spot = [o for o in found if o.spot_price is not None]
    price = CatalogPrice(
        cheapest=min(priced, key=lambda o: o.price, default=None),
        cheapest_spot=min(spot, key=lambda o: o.spot_price, default=None),
        offers=len(found),
    )
    cache.set(_key(options), price, CACHE_SECONDS)
    return price


def _read_in_background(options: dict) -> None:
    key = _key(options)
    with _lock:
        if key in _reading:
            return
        _reading.add(key)

    def read() -> None:
        try:
            catalog_read(options)
        finally:
            with _lock:
                _reading.discard(key)

    threading.Thread(target=read, name="skypilot-catalog", daemon=True).start()


def _where(offer: sky_sdk.Offer) -> str:
    return " ".join(part for part in (offer.cloud, offer.region, offer.instance_type) if part)


def _against(price: Decimal, cheapest: float) -> str:
    percent = (float(price) - cheapest) / cheapest * 100
    if abs(percent) < 0.5:
        return "the same as"
    return f"{abs(percent):.0f}% {'over' if percent > 0 else 'under'}"


def catalog_summary(gpu: GpuType) -> str:
    """One line for the admin: the cheapest on-demand and spot price SkyPilot's catalogs list
    for what this type rents, and this type's price against it."""
    if gpu.provider != "skypilot":
        return "Only SkyPilot's types have a catalog to compare with."
    options = type_options(gpu)
    if not options.get("accelerators"):
        return "Set its SkyPilot options (accelerators) to compare with SkyPilot's catalog."
    if options_problems(options):
        return "Its SkyPilot options are refused (see them below): nothing to compare with."
    if not sky_sdk.installed():
        return "SkyPilot is not installed on this server (pip install -e '.[cloud]')."
    found = cache.get(_key(options))
    if found is None:
        _read_in_background(options)
        return "Reading SkyPilot's catalog; reload the page in a few seconds."
    if found.error:
        return f"SkyPilot's catalog could not be read: {found.error}"
    if not found.offers:
        return f"SkyPilot's catalog lists no machine with {options['accelerators']} where allowed."
    parts = []
    if found.cheapest:
        parts.append(f"on-demand from ${found.cheapest.price:.3f}/h ({_where(found.cheapest)})")
    if found.cheapest_spot:
        spot = found.cheapest_spot
        parts.append(f"spot from ${spot.spot_price:.3f}/h ({_where(spot)})")
    line = f"SkyPilot's catalog: {', '.join(parts)}; {found.offers} offers."
    spot_first = bool(options.get("use_spot")) and found.cheapest_spot
    base = found.cheapest_spot.spot_price if spot_first else getattr(found.cheapest, "price", None)
    if base and gpu.hourly_price:
        kind = "spot" if spot_first else "on-demand"
        line += (
            f" This type's price, ${gpu.hourly_price}/h, is {_against(gpu.hourly_price, base)} "
            f"the cheapest {kind}."
        )
    return line
