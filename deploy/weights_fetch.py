"""`python3 -m deploy.weights_fetch --to PATH`: a rented endpoint's replica fetches its model's
weights from Kestrel when it starts (the SkyServe task's `run`, deploy/remote_endpoint.py).

SkyServe starts a replacement replica with the same task at any time, days after the endpoint
started, so the task holds nothing that expires: the replica mints a token of its own for each
try, valid a few minutes, naming the one thing it is for (this endpoint's weights), signed with
the endpoint's secret it already holds (INFERENCE_TOKEN); Kestrel's view
(deploy.api.deployment_weights) checks it.

The download goes to a temporary name next to the target and is renamed into place only once it
has the size Kestrel announced, so the file at PATH is whole or absent. Standard library only:
this runs before anything else on the replica, with no Django.
"""

import argparse
import http.client
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from deploy.inference.tokens import inference_token

ACTION = "weights"
TOKEN_SECONDS = 300  # Kestrel refuses tokens valid for longer than deploy.remote_endpoint says
ATTEMPTS = 5
FIRST_WAIT_SECONDS = 5.0  # doubled after each failed try
TIMEOUT_SECONDS = 60  # for the connection and each read, not the whole download
BLOCK = 1024 * 1024


class WeightsFetchError(Exception):
    pass


def weights_token(*, secret: str, endpoint: str, now: float | None = None) -> str:
    """The token of a replica of `endpoint` (`deployment-<slug>`) for its weights, expiring
    TOKEN_SECONDS after `now`."""
    return inference_token(
        secret=secret, server=endpoint, action=ACTION, now=now, ttl=TOKEN_SECONDS
    )


def _refusal(error: urllib.error.HTTPError) -> str:
    try:
        detail = error.read(300).decode(errors="replace").strip()
    except (OSError, http.client.HTTPException):
        detail = ""
    return f"Kestrel answered {error.code}" + (f": {detail}" if detail else "")


def weights_download(*, url: str, token: str, target: Path) -> int:
    """Download `url` to `target` with `token`; the size of what was stored."""
    request = urllib.request.Request(url)  # noqa: S310 - Kestrel's own address, from the task
    # Never sent on to where Kestrel redirects (S3's presigned URL refuses a second credential).
    request.add_unredirected_header("Authorization", f"Bearer {token}")
    part = target.with_name(f".{target.name}.part-{os.getpid()}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:  # noqa: S310
            length = answer.headers.get("Content-Length", "")
            if not length.isdigit():
                raise WeightsFetchError(
                    "Kestrel's answer gave no Content-Length, so a whole download could not be "
                    "told from a cut one."
                )
            with part.open("wb") as out:
                shutil.copyfileobj(answer, out, BLOCK)
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
        if size != int(length):
            raise WeightsFetchError(f"the download was cut: {size} of {length} bytes arrived")
        os.replace(part, target)
    except urllib.error.HTTPError as error:
        raise WeightsFetchError(_refusal(error)) from None
    except (OSError, http.client.HTTPException) as error:
        raise WeightsFetchError(f"the download failed: {error!r}") from None
    finally:
        part.unlink(missing_ok=True)
    return size


def weights_fetch(
    *,
    url: str,
    endpoint: str,
    secret: str,
    target: Path,
    attempts: int = ATTEMPTS,
    wait: float = FIRST_WAIT_SECONDS,
    clock: Callable[[], float] = time.time,
) -> int:
    """Fetch the weights to `target`, trying `attempts` times with a fresh token each time;
    the size stored. A file already at `target` is whole (see above) and is kept."""
    if target.is_file():
        return target.stat().st_size
    target.parent.mkdir(parents=True, exist_ok=True)
    reasons = []
    for attempt in range(1, attempts + 1):
        token = weights_token(secret=secret, endpoint=endpoint, now=clock())
        try:
            return weights_download(url=url, token=token, target=target)
        except WeightsFetchError as error:
            reasons.append(f"try {attempt}: {error}")
            print(f"Fetching the model's weights, {reasons[-1]}", file=sys.stderr, flush=True)
        if attempt < attempts:
            time.sleep(wait * 2 ** (attempt - 1))
    raise WeightsFetchError(
        f"The model's weights could not be fetched from {url} after {attempts} tries ("
        + "; ".join(reasons)
        + "). A 404 means Kestrel no longer knows this endpoint as one that should run, or "
        "this machine's clock is far off."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--to", required=True, type=Path, help="where the weights are stored")
    args = parser.parse_args(argv)
    try:
        url = os.environ["KESTREL_WEIGHTS_SOURCE"]
        endpoint = os.environ["KESTREL_ENDPOINT"]
        secret = os.environ["INFERENCE_TOKEN"]
    except KeyError as missing:
        print(
            f"{missing.args[0]} is not set: this runs on a rented endpoint's replica, whose "
            "SkyServe task sets it (deploy/remote_endpoint.py).",
            file=sys.stderr,
        )
        return 2
    try:
        size = weights_fetch(url=url, endpoint=endpoint, secret=secret, target=args.to)
    except WeightsFetchError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"The model's weights are at {args.to} ({size} bytes).", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
