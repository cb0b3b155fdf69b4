"""The tokens web processes present to model servers.

Each token is minted for one call: it names the server it is for (`shared`, or
`deployment-<slug>`), what it may do there (`predict` one model file, or read `stats`), and
expires a minute later. It is an HMAC over those claims with the secret web processes and model
servers share (settings.INFERENCE_TOKEN), so a token seen in a log or a request capture opens
nothing else and nothing later. Standard library only: model servers import no Django apps.

The other way round, a rented endpoint's replica mints one with its endpoint's secret to fetch
its weights from Kestrel when it starts (`weights` on `deployment-<slug>`, deploy/weights_fetch.py).
"""

import base64
import binascii
import hashlib
import hmac
import json
import time

TTL_SECONDS = 60
_CONTEXT = b"kestrel-inference-token:v1|"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: str, payload: bytes) -> bytes:
    return hmac.new(secret.encode(), _CONTEXT + payload, hashlib.sha256).digest()


def inference_token(
    *,
    secret: str,
    server: str,
    action: str,
    model_key: str = "",
    model_path: str = "",
    now: float | None = None,
    ttl: int = TTL_SECONDS,
) -> str:
    claims = {
        "srv": server,
        "act": action,
        "key": model_key,
        "path": model_path,
        "exp": int((time.time() if now is None else now) + ttl),
    }
    payload = json.dumps(claims, separators=(",", ":"), sort_keys=True).encode()
    return f"{_b64(payload)}.{_b64(_mac(secret, payload))}"


def inference_token_refusal(
    token: str,
    *,
    secret: str,
    server: str,
    action: str,
    model_key: str = "",
    model_path: str = "",
    now: float | None = None,
    longest: float | None = None,
) -> str | None:
    """Why `token` does not allow `action` on `server` (for that model), or None if it does.
    `longest`: the most seconds ahead its expiry may lie (a token minted to last a day, were
    it seen, would open the call for a day)."""
    payload_text, _, mac_text = token.partition(".")
    try:
        payload, mac = _unb64(payload_text), _unb64(mac_text)
    except (binascii.Error, ValueError):
        return "Missing or wrong inference token."
    if not payload or not hmac.compare_digest(mac, _mac(secret, payload)):
        return "Missing or wrong inference token."
    claims = json.loads(payload)
    now = time.time() if now is None else now
    if claims.get("exp", 0) < now:
        return "The inference token has expired."
    if longest is not None and claims.get("exp", 0) > now + longest:
        return "The inference token is valid for longer than allowed."
    if claims.get("srv") != server or claims.get("act") != action:
        return "The inference token is not for this server or this call."
    if action == "predict" and (claims.get("key") != model_key or claims.get("path") != model_path):
        return "The inference token is not for this model."
    return None
