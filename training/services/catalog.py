"""The GPU catalog: the machines a job can run on, their prices, and who may pick which."""

import functools
import importlib.util
import math
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction

from billing.models import Plan
from billing.plans import plan_default, plans_seed
from core.errors import ServiceError
from training.models import GpuType
from workspaces.models import Workspace

LOCAL_SLUG = "local"

PROVIDER_NAMES = {
    "local": "This machine",
    "skypilot": "SkyPilot",
    "kubernetes": "Kubernetes",
}

PAID_PLANS = ["pro", "enterprise"]

# Community-cloud prices per GPU-hour (2026 ballpark). Throughput is dense FP16/BF16 tensor math
# with FP32 accumulation, bandwidth the spec sheet's (SXM parts for A100/H100/H200/B200).
# Admins edit prices in the Django admin; seeding never overwrites them.
_CLOUD_GPUS = [
    {
        "slug": "rtx-2000-ada",
        "name": "RTX 2000 Ada",
        "description": "Ada Lovelace, 16 GB GDDR6",
        "vram_gb": 16,
        "fp16_tflops": 48.0,
        "memory_bandwidth_gbs": 224,
        "hourly_price": Decimal("0.24"),
    },
    {
        "slug": "rtx-a4500",
        "name": "RTX A4500",
        "description": "Ampere, 20 GB GDDR6",
        "vram_gb": 20,
        "fp16_tflops": 94.6,
        "memory_bandwidth_gbs": 640,
        "hourly_price": Decimal("0.25"),
    },
    {
        "slug": "rtx-4000-ada",
        "name": "RTX 4000 Ada",
        "description": "Ada Lovelace, 20 GB GDDR6",
        "vram_gb": 20,
        "fp16_tflops": 81.9,
        "memory_bandwidth_gbs": 360,
        "hourly_price": Decimal("0.26"),
    },
    {
        "slug": "rtx-a5000",
        "name": "RTX A5000",
        "description": "Ampere, 24 GB GDDR6",
        "vram_gb": 24,
        "fp16_tflops": 111.1,
        "memory_bandwidth_gbs": 768,
        "hourly_price": Decimal("0.27"),
    },
    {
        "slug": "rtx-3090",
        "name": "RTX 3090",
        "description": "Ampere (GeForce), 24 GB GDDR6X",
        "vram_gb": 24,
        "fp16_tflops": 71.0,
        "memory_bandwidth_gbs": 936,
        "hourly_price": Decimal("0.46"),
    },
    {
        "slug": "rtx-a6000",
        "name": "RTX A6000",
        "description": "Ampere, 48 GB GDDR6",
        "vram_gb": 48,
        "fp16_tflops": 154.8,
        "memory_bandwidth_gbs": 768,
        "hourly_price": Decimal("0.49"),
    },
    {
        "slug": "rtx-4090",
        "name": "RTX 4090",
        "description": "Ada Lovelace (GeForce), 24 GB GDDR6X",
        "vram_gb": 24,
        "fp16_tflops": 165.2,
        "memory_bandwidth_gbs": 1008,
        "hourly_price": Decimal("0.69"),
    },
    {
        "slug": "l40s",
        "name": "L40S",
        "description": "Ada Lovelace, 48 GB GDDR6",
        "vram_gb": 48,
        "fp16_tflops": 362.1,
        "memory_bandwidth_gbs": 864,
        "hourly_price": Decimal("0.86"),
    },
    {
        "slug": "rtx-pro-6000",
        "name": "RTX PRO 6000",
        "description": "Blackwell, 96 GB GDDR7",
        "vram_gb": 96,
        "fp16_tflops": 503.8,
        "memory_bandwidth_gbs": 1792,
        "hourly_price": Decimal("1.84"),
    },
    {
        "slug": "a100-80gb",
        "name": "A100 80 GB",
        "description": "Ampere SXM, 80 GB HBM2e",
        "vram_gb": 80,
        "fp16_tflops": 312.0,
        "memory_bandwidth_gbs": 2039,
        "hourly_price": Decimal("1.49"),
        "plans": PAID_PLANS,
    },
    {
        "slug": "h100-80gb",
        "name": "H100 80 GB",
        "description": "Hopper SXM, 80 GB HBM3",
        "vram_gb": 80,
        "fp16_tflops": 989.4,
        "memory_bandwidth_gbs": 3350,
        "hourly_price": Decimal("2.69"),
        "plans": PAID_PLANS,
    },
    {
        "slug": "h200",
        "name": "H200",
        "description": "Hopper SXM, 141 GB HBM3e",
        "vram_gb": 141,
        "fp16_tflops": 989.4,
        "memory_bandwidth_gbs": 4800,
        "hourly_price": Decimal("3.59"),
        "plans": PAID_PLANS,
    },
    {
        "slug": "b200",
        "name": "B200",
        "description": "Blackwell SXM, 180 GB HBM3e",
        "vram_gb": 180,
        "fp16_tflops": 2250.0,
        "memory_bandwidth_gbs": 8000,
        "hourly_price": Decimal("5.98"),
        "plans": PAID_PLANS,
    },
]
GPU_CATALOG = [
    {**spec, "provider": "skypilot", "plans": spec.get("plans", []), "sort_order": 10 * n}
    for n, spec in enumerate(_CLOUD_GPUS, start=1)
]


# --- this machine ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalDevice:
    kind: str  # "cpu" or "cuda"
    name: str
    description: str
    vram_gb: int  # of one GPU; 0 on a CPU
    count: int  # GPUs, or CPU cores


def _nvidia_gpus() -> list[tuple[str, int]]:
    """(name, memory in MiB) per GPU from nvidia-smi; empty when there is none or it fails."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return []
    try:
        result = subprocess.run(  # noqa: S603  (fixed arguments, no shell)
            [nvidia_smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in result.stdout.splitlines():
        name, _, memory = line.rpartition(",")
        try:
            gpus.append((name.strip(), int(float(memory))))
        except ValueError:
            return []
    return gpus if all(name for name, _ in gpus) else []


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "Unknown CPU"


@functools.cache
def local_device() -> LocalDevice:
    """What this machine trains on, found without importing torch (~2 s and ~900 MB per process)."""
    gpus = _nvidia_gpus()
    if gpus:
        names = list(dict.fromkeys(name for name, _ in gpus))
        # nvidia-smi reports MiB of usable memory (an H200's 141 GB shows as 143771 MiB).
        vram_gb = math.ceil(min(mib for _, mib in gpus) / 1024)
        parts = []
        for name in names:
            same = [mib for gpu_name, mib in gpus if gpu_name == name]
            parts.append(f"{len(same)}× {name} ({math.ceil(min(same) / 1024)} GB)")
        return LocalDevice(
            kind="cuda",
            name=" + ".join(names),
            description=" + ".join(parts),
            vram_gb=vram_gb,
            count=len(gpus),
        )
    cores = os.cpu_count() or 1
    name = _cpu_name()
    return LocalDevice(
        kind="cpu",
        name=name,
        description=f"CPU: {name} ({cores} {'core' if cores == 1 else 'cores'})",
        vram_gb=0,
        count=cores,
    )


def _local_fields() -> dict:
    device = local_device()
    return {
        "name": f"This machine ({device.name})"[:80],
        "description": device.description[:200],
        "vram_gb": device.vram_gb,
    }


# --- seeding -----------------------------------------------------------------------------------


@transaction.atomic
def gpu_catalog_seed() -> list[GpuType]:
    """Create the catalog's missing types; an admin's later edits survive. Safe to run again."""
    plans = {plan.slug: plan for plan in plans_seed()}
    machine = _local_fields()
    local, created = GpuType.objects.get_or_create(
        slug=LOCAL_SLUG,
        defaults={**machine, "provider": "local", "hourly_price": 0, "sort_order": 0},
    )
    if not created:  # the machine under the server can change (a new GPU, another host)
        for field, value in machine.items():
            setattr(local, field, value)
        local.save(update_fields=list(machine))
    types = [local]
    for spec in GPU_CATALOG:
        fields = {key: value for key, value in spec.items() if key not in ("slug", "plans")}
        gpu, created = GpuType.objects.get_or_create(slug=spec["slug"], defaults=fields)
        if created and spec["plans"]:
            gpu.plans.set([plans[slug] for slug in spec["plans"]])
        types.append(gpu)
    return types


# --- choosing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuChoice:
    gpu: GpuType
    available: bool
    reason: str = ""


def provider_name(provider: str) -> str:
    return PROVIDER_NAMES.get(provider, provider)


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _workspace_plan(workspace: Workspace) -> Plan:
    return workspace.plan if workspace.plan_id is not None else plan_default()


def provider_unready(gpu: GpuType) -> str:
    """Why a configured provider cannot run this type on this server, or "": what it needs
    is installed and set (the form offers only types a job can really start on)."""
    if gpu.provider == "skypilot":
        if importlib.util.find_spec("sky") is None:
            return "SkyPilot is not installed on this server (pip install -e '.[cloud]')."
        options = gpu.provider_options or settings.TRAINING_SKYPILOT_TYPES.get(gpu.slug) or {}
        if not options.get("accelerators"):
            return (
                "SkyPilot is not told what to rent for it (its options in the admin, or "
                "TRAINING_SKYPILOT_TYPES)."
            )
    if gpu.provider == "command" and not settings.TRAINING_COMMAND:
        return "The command provider has no command (TRAINING_COMMAND)."
    if gpu.provider in ("skypilot", "command") and not settings.TRAINING_EVENTS_URL:
        return "Remote trainers need the address they reach Kestrel at (TRAINING_EVENTS_URL)."
    return ""


def gpu_choices(*, workspace: Workspace) -> list[GpuChoice]:
    """Every active type in catalog order, each saying whether this workspace may use it."""
    plan = _workspace_plan(workspace)
    providers = set(settings.TRAINING_PROVIDERS)
    choices = []
    for gpu in GpuType.objects.filter(is_active=True).prefetch_related("plans"):
        gpu_plans = list(gpu.plans.all())
        if gpu.provider not in providers:
            reason = (
                f"Its provider, {provider_name(gpu.provider)}, is not configured on this server."
            )
        elif gpu_plans and plan.pk not in {p.pk for p in gpu_plans}:
            reason = (
                f"Not in the {plan.name} plan; {_either([p.name for p in gpu_plans])} includes it."
            )
        elif unready := provider_unready(gpu):
            reason = unready
        else:
            reason = ""
        choices.append(GpuChoice(gpu=gpu, available=not reason, reason=reason))
    return choices


def gpu_pick(*, workspace: Workspace, gpu_id: int | str | None) -> GpuType:
    """The type a person picked, if this workspace may use it."""
    try:
        pk = int(gpu_id)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ServiceError("Pick a machine from the list.") from None
    for choice in gpu_choices(workspace=workspace):
        if choice.gpu.pk == pk:
            if not choice.available:
                raise ServiceError(choice.reason)
            return choice.gpu
    raise ServiceError("Pick a machine from the list.")


def local_type_refresh() -> None:
    """Called where trainers run: "This machine" then names the hardware jobs really get
    (the web server that seeded it may be another machine)."""
    GpuType.objects.filter(slug=LOCAL_SLUG).update(**_local_fields())
