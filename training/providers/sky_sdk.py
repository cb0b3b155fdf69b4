"""The one module that calls SkyPilot (0.14's client SDK); the rest of Kestrel asks these
functions and gets Kestrel's types and `ProviderError`s with SkyPilot's own text.

Every SDK call sends a request to a SkyPilot API server and returns a request id that
`sky.get` resolves, blocking with no timeout: each call here waits in a thread of its own and
gives up after its own deadline. The API server is the one `SKYPILOT_API_SERVER_ENDPOINT` (or
`~/.sky/config.yaml`) names, else a local one SkyPilot starts itself. Cloud credentials stay
where SkyPilot reads them (`~/.aws`, `~/.kube`, ... of whoever runs that server).
"""

import copy
import importlib.util
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from training.providers.base import ProviderError

LAUNCH_SECONDS = 600.0  # a first launch may start SkyPilot's jobs controller: minutes
QUERY_SECONDS = 60.0
CANCEL_SECONDS = 120.0
CATALOG_SECONDS = 30.0  # a first read downloads the catalogs
# What queue_v2 sends back: failure_reason only comes when asked for.
_FIELDS = ["job_id", "task_id", "job_name", "status", "failure_reason", "submitted_at"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class ManagedJob:
    """One SkyPilot managed job, as Kestrel needs it."""

    job_id: int
    name: str
    status: str  # ManagedJobStatus's name: PENDING, STARTING, RUNNING, RECOVERING, ...
    failure_reason: str
    submitted_at: float | None
    terminal: bool  # as SkyPilot's ManagedJobStatus.is_terminal() says
    failed: bool


def installed() -> bool:
    return importlib.util.find_spec("sky") is not None


def sky_module():
    import sky  # the only import of SkyPilot in Kestrel

    return sky


def error_text(exc: BaseException) -> str:
    return ANSI.sub("", str(exc)).strip() or type(exc).__name__


def sky_request(what: str, send: Callable[[], Any], seconds: float) -> Any:
    """Send a request (`send` returns its request id) and resolve it with `sky.get` within
    `seconds`; any SkyPilot error becomes a ProviderError carrying its text."""
    try:
        request_id = send()
    except Exception as exc:  # SkyPilot raises many kinds: its text is what the job shows
        raise ProviderError(f"SkyPilot could not {what}: {error_text(exc)}") from exc
    outcome: dict[str, Any] = {}

    def resolve() -> None:
        try:
            outcome["value"] = sky_module().get(request_id)
        except BaseException as exc:  # noqa: B036 - handed to the waiting thread
            outcome["error"] = exc

    waiter = threading.Thread(target=resolve, name=f"sky-get-{what}", daemon=True)
    waiter.start()
    waiter.join(seconds)
    if waiter.is_alive():
        # The request may still finish on the API server; a launch that does is an orphan
        # the reconciliation cancels.
        raise ProviderError(
            f"SkyPilot did not answer within {seconds:.0f} s when asked to {what} "
            f"(request {request_id})."
        )
    if "error" in outcome:
        exc = outcome["error"]
        raise ProviderError(f"SkyPilot could not {what}: {error_text(exc)}") from exc
    return outcome.get("value")


def task_check(task_config: dict) -> None:
    """Parse the task with SkyPilot's own parser (offline: its schema and field checks)."""
    try:
        sky_module().Task.from_yaml_config(copy.deepcopy(task_config))  # it empties what it gets
    except Exception as exc:
        raise ProviderError(f"SkyPilot refused the task: {error_text(exc)}") from exc


def launch(task_config: dict, name: str) -> int:
    """Launch the task as a managed job (preempted spot machines are recovered); its id."""
    sky = sky_module()
    try:
        task = sky.Task.from_yaml_config(copy.deepcopy(task_config))
    except Exception as exc:
        raise ProviderError(f"SkyPilot refused the task: {error_text(exc)}") from exc
    job_ids, _controller = sky_request(
        "launch the job", lambda: sky.jobs.launch(task, name=name), LAUNCH_SECONDS
    ) or (None, None)
    if isinstance(job_ids, int):  # the API server answers an int or a list (0.14.1's core.py)
        job_ids = [job_ids]
    if not job_ids:
        raise ProviderError("SkyPilot launched nothing: it answered no managed job id.")
    return int(job_ids[0])


def jobs(*, job_ids: Iterable[int] | None = None, skip_finished: bool = False) -> list[ManagedJob]:
    """Managed jobs of every user of the API server (Kestrel's workers may launch as
    different SkyPilot users), all of them or those with these ids."""
    sky = sky_module()
    ids = None if job_ids is None else sorted({int(i) for i in job_ids})
    if ids == []:
        return []
    records, *_ = sky_request(
        "list its managed jobs",
        lambda: sky.jobs.queue_v2(
            refresh=False,
            skip_finished=skip_finished,
            all_users=True,
            job_ids=ids,
            fields=_FIELDS,
        ),
        QUERY_SECONDS,
    )
    found = []
    for record in records:
        status = record.status
        if record.job_id is None or status is None:
            continue
        found.append(
            ManagedJob(
                job_id=int(record.job_id),
                name=record.job_name or "",
                status=status.value,
                failure_reason=ANSI.sub("", record.failure_reason or "").strip(),
                submitted_at=record.submitted_at,
                terminal=status.is_terminal(),
                failed=status.is_failed(),
            )
        )
    return found


def status(job_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """{job id: (ManagedJobStatus name, failure reason)}; a job SkyPilot no longer knows is
    missing from it."""
    return {job.job_id: (job.status, job.failure_reason) for job in jobs(job_ids=job_ids)}


def cancel(job_ids: Iterable[int]) -> None:
    ids = sorted({int(i) for i in job_ids})
    if not ids:
        return
    sky = sky_module()
    sky_request(
        f"cancel job {', '.join(map(str, ids))}",
        lambda: sky.jobs.cancel(job_ids=ids),
        CANCEL_SECONDS,
    )


@dataclass(frozen=True)
class Offer:
    """One machine of SkyPilot's price catalog carrying the asked-for GPUs."""

    cloud: str
    region: str
    instance_type: str
    price: float | None  # on-demand, US dollars an hour (None: the catalog has none)
    spot_price: float | None


def _price(value) -> float | None:
    try:
        price = float(value)
    except (TypeError, ValueError):
        return None
    return price if price == price and price > 0 else None  # NaN: the catalog has no price


def offers(accelerator: str, count: int, clouds: list[str] | None = None) -> list[Offer]:
    """Every region's machine with `count` of `accelerator` in SkyPilot's catalogs (which its
    API server downloads and keeps in ~/.sky/catalogs), on `clouds` or any of them."""
    sky = sky_module()
    found = sky_request(
        "read its GPU price catalog",
        lambda: sky.client.sdk.list_accelerators(
            gpus_only=True,
            name_filter=f"^{re.escape(accelerator)}$",
            quantity_filter=count,
            clouds=clouds or None,
            all_regions=True,
            require_price=True,
            case_sensitive=False,
        ),
        CATALOG_SECONDS,
    )
    listed = []
    for name, items in (found or {}).items():
        if str(name).lower() != accelerator.lower():
            continue
        for item in items:
            if int(float(item.accelerator_count)) != count:
                continue
            listed.append(
                Offer(
                    cloud=str(item.cloud),
                    region=str(item.region or ""),
                    instance_type=str(item.instance_type or ""),
                    price=_price(item.price),
                    spot_price=_price(item.spot_price),
                )
            )
    return listed
