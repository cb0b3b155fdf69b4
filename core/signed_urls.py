"""URLs that are their own key, for clients that fetch without credentials (stock `ultralytics`
downloading a dataset's images or a model's weights): each names one file and one purpose, and
expires. The signature is an HMAC of the purpose, the file and the expiry under SECRET_KEY, as
training/remote.py signs the remote trainer's upload URLs; it travels in the query string, so
the path, which Ultralytics caches by, stays the same from one signing to the next."""

import hashlib
import hmac
import time
from collections.abc import Callable
from urllib.parse import urlencode

from django.conf import settings


def _signer(purpose: str) -> Callable[[str, int], str]:
    """A fast signer for many files of one purpose (one NDJSON line per image)."""
    key = hashlib.sha256(f"kestrel.signed-url.{purpose}:{settings.SECRET_KEY}".encode()).digest()
    base = hmac.new(key, digestmod=hashlib.sha256)

    def sign(subject: str, expires: int) -> str:
        mac = base.copy()
        mac.update(f"{subject}:{expires}".encode())
        return mac.hexdigest()

    return sign


def signed_query_maker(purpose: str, *, seconds: int) -> Callable[[str], str]:
    """`subject -> "exp=...&sig=..."` for URLs of `purpose` that all expire `seconds` from now."""
    sign = _signer(purpose)
    expires = int(time.time()) + seconds

    def query(subject: str) -> str:
        return urlencode({"exp": expires, "sig": sign(subject, expires)})

    return query


def signed_query(purpose: str, subject: str, *, seconds: int) -> str:
    return signed_query_maker(purpose, seconds=seconds)(subject)


def signed_query_valid(purpose: str, subject: str, query) -> bool:
    """Whether `query` (request.GET) holds an unexpired signature of `subject` for `purpose`."""
    expires, signature = query.get("exp", ""), query.get("sig", "")
    if not (expires.isdigit() and len(expires) <= 12 and isinstance(signature, str)):
        return False
    good = _signer(purpose)(subject, int(expires))
    return hmac.compare_digest(signature, good) and int(expires) >= time.time()
