import os
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command

from billing.models import Plan
from core.errors import ServiceError
from tests.workspaces.factories import UserFactory, WorkspaceFactory
from training.models import GpuType
from training.services.catalog import (
    GPU_CATALOG,
    gpu_catalog_seed,
    gpu_choices,
    gpu_pick,
    local_device,
)

ROOT = Path(__file__).resolve().parents[2]
NAMES = [
    "RTX 2000 Ada",
    "RTX A4500",
    "RTX 4000 Ada",
    "RTX A5000",
    "RTX 3090",
    "RTX A6000",
    "RTX 4090",
    "L40S",
    "RTX PRO 6000",
    "A100 80 GB",
    "H100 80 GB",
    "H200",
    "B200",
]


@pytest.fixture(autouse=True)
def _fresh_local_device():
    local_device.cache_clear()
    yield
    local_device.cache_clear()


@pytest.fixture
def no_nvidia_smi(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **kw: None)


@pytest.fixture
def nvidia_smi(monkeypatch):
    """A machine whose nvidia-smi prints `output` (or fails with `error`)."""
    calls = []

    def install(output: str = "", error: Exception | None = None):
        monkeypatch.setattr(shutil, "which", lambda name, *a, **kw: f"/usr/bin/{name}")

        def run(args, **kwargs):
            calls.append((args, kwargs))
            if error is not None:
                raise error
            return subprocess.CompletedProcess(args, 0, stdout=output, stderr="")

        monkeypatch.setattr(subprocess, "run", run)
        return calls

    return install


def by_slug(choices):
    return {choice.gpu.slug: choice for choice in choices}


# --- seeding -----------------------------------------------------------------------------------


def test_seed_creates_this_machine_and_every_cloud_type_in_order(plans, no_nvidia_smi):
    gpu_catalog_seed()

    types = list(GpuType.objects.all())
    assert len(types) == 14
    assert types[0].slug == "local"
    assert types[0].provider == "local"
    assert types[0].hourly_price == 0
    assert [gpu.name for gpu in types[1:]] == NAMES
    assert {gpu.provider for gpu in types[1:]} == {"skypilot"}
    prices = [gpu.hourly_price for gpu in types[1:]]
    assert prices[0] == Decimal("0.24")
    assert GpuType.objects.get(slug="h100-80gb").hourly_price == Decimal("2.69")
    assert GpuType.objects.get(slug="b200").vram_gb == 180
    assert all(gpu.fp16_tflops > 0 and gpu.memory_bandwidth_gbs > 0 for gpu in types[1:])


def test_seed_restricts_a100_and_bigger_to_paid_plans(plans, no_nvidia_smi):
    gpu_catalog_seed()

    for gpu in GpuType.objects.prefetch_related("plans"):
        plan_slugs = {plan.slug for plan in gpu.plans.all()}
        if gpu.slug in ("a100-80gb", "h100-80gb", "h200", "b200"):
            assert plan_slugs == {"pro", "enterprise"}, gpu.slug
        else:
            assert plan_slugs == set(), gpu.slug


def test_seed_is_idempotent_and_keeps_an_admins_price_and_plans(plans, no_nvidia_smi):
    gpu_catalog_seed()
    h100 = GpuType.objects.get(slug="h100-80gb")
    h100.hourly_price = Decimal("1.99")
    h100.save(update_fields=["hourly_price"])
    h100.plans.set([Plan.objects.get(slug="enterprise")])

    gpu_catalog_seed()

    assert GpuType.objects.count() == 14
    h100.refresh_from_db()
    assert h100.hourly_price == Decimal("1.99")
    assert [plan.slug for plan in h100.plans.all()] == ["enterprise"]


def test_seed_refreshes_this_machine_from_what_it_now_has(plans, nvidia_smi, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **kw: None)
    gpu_catalog_seed()
    local = GpuType.objects.get(slug="local")
    assert local.vram_gb == 0
    assert local.description.startswith("CPU: ")
    local.hourly_price = Decimal("0.10")  # an admin's edit
    local.save(update_fields=["hourly_price"])

    local_device.cache_clear()
    nvidia_smi("NVIDIA H200, 143771\n")
    gpu_catalog_seed()

    local.refresh_from_db()
    assert local.name == "This machine (NVIDIA H200)"
    assert local.description == "1× NVIDIA H200 (141 GB)"
    assert local.vram_gb == 141
    assert local.hourly_price == Decimal("0.10")


def test_seed_demo_seeds_the_catalog(db, no_nvidia_smi):
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115

    assert GpuType.objects.count() == len(GPU_CATALOG) + 1


# --- this machine ------------------------------------------------------------------------------


def test_local_device_on_this_cpu_machine_names_the_cpu_and_its_cores():
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")

    device = local_device()

    assert device.kind == "cpu"
    assert device.vram_gb == 0
    assert device.count == os.cpu_count()
    assert device.description.startswith("CPU: ")
    assert device.description.endswith(f"({os.cpu_count()} cores)")
    assert device.name and device.name in device.description


def test_local_device_reads_nvidia_smi(nvidia_smi):
    calls = nvidia_smi("NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n")

    device = local_device()

    assert device.kind == "cuda"
    assert device.count == 2
    assert device.vram_gb == 80
    assert device.description == "2× NVIDIA H100 80GB HBM3 (80 GB)"
    args, kwargs = calls[0]
    assert args[1:] == ["--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
    assert kwargs["timeout"] == 5


@pytest.mark.parametrize(
    "error",
    [
        subprocess.TimeoutExpired("nvidia-smi", 5),
        subprocess.CalledProcessError(9, "nvidia-smi", "NVIDIA-SMI has failed"),
        FileNotFoundError("nvidia-smi"),
    ],
)
def test_local_device_falls_back_to_the_cpu_when_nvidia_smi_fails(nvidia_smi, error):
    nvidia_smi(error=error)

    device = local_device()

    assert device.kind == "cpu"
    assert device.description.startswith("CPU: ")


def test_local_device_ignores_output_it_cannot_read(nvidia_smi):
    nvidia_smi("No devices were found\n")

    assert local_device().kind == "cpu"


def test_local_device_is_looked_up_once(nvidia_smi):
    calls = nvidia_smi("NVIDIA L4, 23034\n")

    assert local_device() is local_device()
    assert len(calls) == 1


# --- choosing ----------------------------------------------------------------------------------


@pytest.fixture
def catalog_seeded(plans, no_nvidia_smi):
    return gpu_catalog_seed()


def test_only_configured_providers_are_available(team, catalog_seeded, settings):
    settings.TRAINING_PROVIDERS = ["local"]

    choices = gpu_choices(workspace=team.workspace)

    assert [choice.gpu.slug for choice in choices][:2] == ["local", "rtx-2000-ada"]
    assert len(choices) == 14
    assert [choice.gpu.slug for choice in choices if choice.available] == ["local"]
    rtx = by_slug(choices)["rtx-4090"]
    assert rtx.reason == "Its provider, SkyPilot, is not configured on this server."


def test_a_configured_provider_is_offered_only_once_it_can_start_a_job(
    team, catalog_seeded, settings, monkeypatch
):
    """SkyPilot listed but not installed, or not told what to rent, or remote trainers with no
    address to reach Kestrel at: each type says why and cannot be picked."""
    import importlib.util

    settings.TRAINING_PROVIDERS = ["local", "skypilot"]
    settings.TRAINING_SKYPILOT_TYPES = {"rtx-4090": {"accelerators": "RTX4090"}}
    settings.TRAINING_EVENTS_URL = "https://kestrel.example.com"
    found = importlib.util.find_spec
    installed = {"sky": False}

    def find_spec(name, *args):
        if name == "sky":
            return object() if installed["sky"] else None
        return found(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    choices = by_slug(gpu_choices(workspace=team.workspace))
    assert "SkyPilot is not installed" in choices["rtx-4090"].reason
    installed["sky"] = True
    choices = by_slug(gpu_choices(workspace=team.workspace))
    assert choices["rtx-4090"].available
    assert "TRAINING_SKYPILOT_TYPES" in choices["l40s"].reason
    settings.TRAINING_EVENTS_URL = ""
    choices = by_slug(gpu_choices(workspace=team.workspace))
    assert "TRAINING_EVENTS_URL" in choices["rtx-4090"].reason
    with pytest.raises(ServiceError, match="TRAINING_EVENTS_URL"):
        gpu_pick(workspace=team.workspace, gpu_id=choices["rtx-4090"].gpu.pk)


def test_gpu_pick_refuses_a_type_whose_provider_is_not_configured(team, catalog_seeded, settings):
    settings.TRAINING_PROVIDERS = ["local"]
    rtx = GpuType.objects.get(slug="rtx-4090")

    with pytest.raises(ServiceError, match="SkyPilot, is not configured on this server"):
        gpu_pick(workspace=team.workspace, gpu_id=rtx.pk)
    local = gpu_pick(workspace=team.workspace, gpu_id=str(GpuType.objects.get(slug="local").pk))
    assert local.slug == "local"


def test_free_plan_cannot_pick_a100_and_bigger(plans, catalog_seeded, skypilot_ready):
    free = WorkspaceFactory(plan=Plan.objects.get(slug="free"))

    choices = by_slug(gpu_choices(workspace=free))

    assert choices["rtx-pro-6000"].available
    assert not choices["h100-80gb"].available
    assert choices["h100-80gb"].reason == "Not in the Free plan; Pro or Enterprise includes it."
    with pytest.raises(ServiceError, match="Not in the Free plan; Pro or Enterprise includes it"):
        gpu_pick(workspace=free, gpu_id=choices["h100-80gb"].gpu.pk)
    assert gpu_pick(workspace=free, gpu_id=choices["rtx-4090"].gpu.pk).slug == "rtx-4090"


def test_pro_plan_can_pick_every_cloud_type(team, catalog_seeded, skypilot_ready):

    choices = gpu_choices(workspace=team.workspace)

    assert all(choice.available for choice in choices)
    assert gpu_pick(workspace=team.workspace, gpu_id=by_slug(choices)["b200"].gpu.pk).name == "B200"


def test_a_workspace_without_a_plan_is_on_the_default_plan(plans, catalog_seeded, skypilot_ready):
    workspace = WorkspaceFactory.build(plan=None)

    choices = by_slug(gpu_choices(workspace=workspace))

    assert choices["h200"].reason == "Not in the Free plan; Pro or Enterprise includes it."
    assert choices["l40s"].available


def test_gpu_pick_refuses_unknown_and_inactive_types(team, catalog_seeded):
    local = GpuType.objects.get(slug="local")
    local.is_active = False
    local.save(update_fields=["is_active"])

    assert [c.gpu.slug for c in gpu_choices(workspace=team.workspace)][0] == "rtx-2000-ada"
    for gpu_id in (local.pk, 999_999, "", None, "abc"):
        with pytest.raises(ServiceError, match="Pick a machine from the list."):
            gpu_pick(workspace=team.workspace, gpu_id=gpu_id)


def test_gpu_choices_reads_the_catalog_in_three_queries(
    team, catalog_seeded, settings, django_assert_num_queries
):
    settings.TRAINING_PROVIDERS = ["local", "skypilot"]
    workspace = type(team.workspace).objects.get(pk=team.workspace.pk)

    with django_assert_num_queries(3):  # the plan, the types, their plans
        choices = gpu_choices(workspace=workspace)
    assert len(choices) == 14


# --- admin -------------------------------------------------------------------------------------


def test_admin_edits_a_price_that_survives_a_reseed(client, catalog_seeded):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    h200 = GpuType.objects.get(slug="h200")

    response = client.get("/admin/training/gputype/")
    assert response.status_code == 200
    assert b"H200" in response.content
    response = client.post(
        f"/admin/training/gputype/{h200.pk}/change/",
        {
            "slug": h200.slug,
            "name": h200.name,
            "vram_gb": h200.vram_gb,
            "fp16_tflops": h200.fp16_tflops,
            "memory_bandwidth_gbs": h200.memory_bandwidth_gbs,
            "hourly_price": "3.19",
            "provider": h200.provider,
            "plans": [plan.pk for plan in h200.plans.all()],
            "is_active": "on",
            "sort_order": h200.sort_order,
            "description": h200.description,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]

    gpu_catalog_seed()

    h200.refresh_from_db()
    assert h200.hourly_price == Decimal("3.19")


def test_admin_lists_jobs_and_models(client, db):
    client.force_login(UserFactory(is_staff=True, is_superuser=True))

    assert client.get("/admin/training/trainingjob/").status_code == 200
    assert client.get("/admin/training/trainedmodel/").status_code == 200
    assert client.get("/admin/training/trainingjob/add/").status_code == 403


def test_catalog_does_not_import_torch():
    code = (
        "import sys, django; django.setup();"
        "from training.services.catalog import local_device; print(local_device().description);"
        "assert 'torch' not in sys.modules and 'ultralytics' not in sys.modules, 'imported'"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert result.returncode == 0, result.stderr
    assert re.match(r"CPU: |\d+× ", result.stdout), result.stdout
