"""The options a GPU type gives SkyPilot's provider, and what is wrong with them: checked when
an admin saves the type (training.models.GpuType.clean) and when a job is launched
(training.providers.skypilot). Imports nothing of Kestrel's."""

import json

OPTION_KEYS = {
    "accelerators": "SkyPilot's accelerator name, e.g. H100, A100-80GB, L4 (required)",
    "count": "GPUs per machine (default 1)",
    "infra": "one or more of cloud[/region[/zone]], e.g. aws/us-east-1, k8s/ctx (any of them)",
    "clouds": "clouds to choose from, e.g. [aws, gcp] (with regions: each cloud/region)",
    "regions": "regions to choose from",
    "use_spot": "rent spot machines, recovered when preempted (default false)",
    "disk_size": "disk in GB (default SkyPilot's)",
    "max_restarts_on_errors": "restarts of a trainer that failed on its own (default 1)",
    # The supervisor cancels a run still queued or provisioning past it
    # (training.process.beat).
    "provision_timeout_seconds": "how long the job may wait for a machine (default 1800)",
}


def _strings(value) -> bool:
    items = value if isinstance(value, list | tuple) else [value]
    return all(isinstance(v, str) and v.strip() for v in items) and bool(items)


def _whole(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


_CHECKS = {
    "accelerators": (lambda v: isinstance(v, str) and bool(v.strip()), "a name such as H100"),
    "count": (lambda v: _whole(v, 1), "a whole number of at least 1"),
    "infra": (_strings, "a cloud[/region[/zone]] or a list of them"),
    "clouds": (_strings, "a cloud or a list of clouds"),
    "regions": (_strings, "a region or a list of regions"),
    "use_spot": (lambda v: isinstance(v, bool), "true or false"),
    "disk_size": (lambda v: _whole(v, 1), "a whole number of GB"),
    "max_restarts_on_errors": (lambda v: _whole(v, 0), "a whole number, 0 or more"),
    "provision_timeout_seconds": (lambda v: _whole(v, 60), "a whole number of at least 60"),
}


def options_problems(options) -> list[str]:
    """What is wrong with a GPU type's SkyPilot options, in words for the admin ([]: none)."""
    if not isinstance(options, dict):
        return ['The options are a JSON object, e.g. {"accelerators": "H100"}.']
    problems = []
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown:
        problems.append(
            f"Options SkyPilot's provider does not know: {', '.join(unknown)} "
            f"(known: {', '.join(OPTION_KEYS)})."
        )
    if not options.get("accelerators"):
        problems.append("accelerators is required: SkyPilot's name for the GPU, e.g. H100.")
    for key, (ok, wanted) in _CHECKS.items():
        if key in options and options[key] is not None and not ok(options[key]):
            problems.append(f"{key} must be {wanted}, not {json.dumps(options[key])}.")
    return problems
