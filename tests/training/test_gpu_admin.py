"""The admin maps GPU types to providers (issue 18): each type's SkyPilot options (checked when
saved, never credentials), its price as the operator's cost plus a markup, and SkyPilot's
catalog price beside it, read in the background so the page never waits on SkyPilot.

SkyPilot is answered at sky_sdk's edge (its `sky_module`): no API server or cloud is reachable here.
"""

import time
from collections import namedtuple
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.core.cache import cache

import training.providers.sky_sdk as sky_sdk
from tests.workspaces.factories import UserFactory
from training.models import GpuType
from training.providers.base import ProviderError
from training.providers.skypilot import type_options
from training.providers.skypilot_options import options_problems
from training.services import cloud_prices
from training.services.catalog import gpu_catalog_seed, provider_unready

pytestmark = pytest.mark.django_db

# SkyPilot's catalog.common.InstanceTypeInfo, field for field.
Info = namedtuple(
    "Info",
    "cloud instance_type accelerator_name accelerator_count cpu_count device_memory memory "
    "price spot_price region",
)
H100_OFFERS = {
    "H100": [
        Info(
            "Lambda", "gpu_1x_h100_sxm5", "H100", 1.0, 26, 80, 225, 2.99, float("nan"), "us-east-1"
        ),
        Info("AWS", "p5.4xlarge", "H100", 1.0, 16, 80, 256, 6.88, 2.75, "us-east-1"),
        Info("AWS", "p5.4xlarge", "H100", 1.0, 16, 80, 256, 7.20, 2.10, "eu-west-1"),
        Info("AWS", "p5.48xlarge", "H100", 8.0, 192, 80, 2048, 55.04, 22.0, "us-east-1"),
    ],
    "H100-MEGA": [Info("GCP", "a3-megagpu-8g", "H100-MEGA", 1.0, 8, 80, 1872, 1.0, 0.5, "x")],
}


class CatalogSky:
    """SkyPilot's SDK as sky_sdk.offers sees it: list_accelerators returns a request id."""

    def __init__(self, answer):
        self.answer, self.asked = answer, []
        self.client = SimpleNamespace(sdk=SimpleNamespace(list_accelerators=self._list))

    def _list(self, **kwargs):
        self.asked.append(kwargs)
        return "req-catalog"

    def get(self, request_id):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.fixture
def catalog_sky(monkeypatch):
    sky = CatalogSky(H100_OFFERS)
    monkeypatch.setattr(sky_sdk, "sky_module", lambda: sky)
    monkeypatch.setattr(sky_sdk, "installed", lambda: True)
    return sky


@pytest.fixture
def admin_client(client, plans):
    gpu_catalog_seed()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def _form(gpu: GpuType, **changes) -> dict:
    data = {
        "slug": gpu.slug,
        "name": gpu.name,
        "description": gpu.description,
        "is_active": "on",
        "sort_order": gpu.sort_order,
        "plans": [plan.pk for plan in gpu.plans.all()],
        "vram_gb": gpu.vram_gb,
        "fp16_tflops": gpu.fp16_tflops,
        "memory_bandwidth_gbs": gpu.memory_bandwidth_gbs,
        "hourly_price": str(gpu.hourly_price),
        "operator_hourly_cost": "",
        "markup_percent": "",
        "provider": gpu.provider,
        "provider_options": "{}",
    }
    data.update(changes)
    return data


def _change(client, gpu: GpuType, **changes):
    return client.post(f"/admin/training/gputype/{gpu.pk}/change/", _form(gpu, **changes))


def test_the_admin_maps_a_type_to_skypilot_with_a_markup_on_its_cost(admin_client, settings):
    h100 = GpuType.objects.get(slug="h100-80gb")
    assert h100.provider == "skypilot"
    settings.TRAINING_EVENTS_URL = "https://kestrel.example.com"
    settings.TRAINING_SKYPILOT_TYPES = {"h100-80gb": {"accelerators": "A100"}}  # the admin wins
    options = '{"accelerators": "H100", "infra": ["aws/us-east-1", "lambda"], "use_spot": true}'
    response = _change(
        admin_client,
        h100,
        hourly_price="1.00",
        operator_hourly_cost="2.750",
        markup_percent="20",
        provider_options=options,
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    h100.refresh_from_db()
    assert h100.hourly_price == Decimal("3.300")  # 2.75 + 20 %, whatever price was typed
    assert h100.provider_options["accelerators"] == "H100"
    assert type_options("h100-80gb")["infra"] == ["aws/us-east-1", "lambda"]
    page = admin_client.get("/admin/training/gputype/").content.decode()
    assert "2.750" in page and "20.00" in page


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ('{"accelerators": "H100", "spot": true}', "does not know: spot"),
        ('{"accelerators": "H100", "aws_secret_access_key": "AKIA..."}', "aws_secret_access_key"),
        ('{"count": 2}', "accelerators is required"),
        ('{"accelerators": "H100", "count": "two"}', "count must be a whole number"),
        ('{"accelerators": "H100", "use_spot": "yes"}', "use_spot must be true or false"),
        ('{"accelerators": "H100", "provision_timeout_seconds": 5}', "at least 60"),
        ('["H100"]', "a JSON object"),
    ],
)
def test_options_skypilot_cannot_use_are_refused_and_nothing_is_saved(admin_client, options, said):
    h100 = GpuType.objects.get(slug="h100-80gb")
    before = h100.provider_options
    response = _change(admin_client, h100, provider_options=options)
    assert response.status_code == 200  # the form again, with the error
    assert said in response.content.decode()
    h100.refresh_from_db()
    assert h100.provider_options == before


def test_a_markup_needs_a_cost_and_only_skypilot_takes_options(admin_client):
    h100 = GpuType.objects.get(slug="h100-80gb")
    response = _change(admin_client, h100, markup_percent="15")
    assert "A markup needs the operator&#x27;s hourly cost." in response.content.decode()
    local = GpuType.objects.get(slug="local")
    response = _change(admin_client, local, provider_options='{"accelerators": "H100"}')
    assert "Only the SkyPilot provider takes options" in response.content.decode()
    local.refresh_from_db()
    assert local.provider_options == {}


def test_the_form_offers_a_type_once_its_options_are_set(settings, plans, monkeypatch):
    gpu_catalog_seed()
    settings.TRAINING_PROVIDERS = ["local", "skypilot"]
    settings.TRAINING_SKYPILOT_TYPES = {}
    settings.TRAINING_EVENTS_URL = "https://kestrel.example.com"
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "sky" else found(n, *a)
    )
    h100 = GpuType.objects.get(slug="h100-80gb")
    assert "its options in the admin" in provider_unready(h100)
    with pytest.raises(ProviderError, match="no SkyPilot accelerator"):
        type_options("h100-80gb")
    h100.provider_options = {"accelerators": "H100"}
    h100.save()
    assert provider_unready(h100) == ""
    assert type_options("h100-80gb") == {"accelerators": "H100"}


def test_options_problems_say_each_thing_wrong():
    assert options_problems({"accelerators": "H100", "count": 8, "infra": "aws"}) == []
    problems = options_problems({"disk_size": 0, "regions": [""], "max_restarts_on_errors": -1})
    assert len(problems) == 4, problems  # accelerators, disk_size, regions, restarts


# --- SkyPilot's catalog beside the price -------------------------------------------------------


def _wait_cached(options: dict) -> None:
    deadline = time.monotonic() + 10
    while cache.get(cloud_prices._key(options)) is None:
        assert time.monotonic() < deadline, "the catalog was never read"
        time.sleep(0.05)


def test_the_change_page_shows_skypilots_cheapest_price_beside_the_types(admin_client, catalog_sky):
    h100 = GpuType.objects.get(slug="h100-80gb")
    h100.provider_options = {"accelerators": "H100"}
    h100.hourly_price = Decimal("3.500")
    h100.save()
    url = f"/admin/training/gputype/{h100.pk}/change/"
    first = admin_client.get(url).content.decode()
    assert "Reading SkyPilot&#x27;s catalog; reload the page in a few seconds." in first
    _wait_cached(h100.provider_options)
    page = admin_client.get(url).content.decode()
    assert "on-demand from $2.990/h (Lambda us-east-1 gpu_1x_h100_sxm5)" in page
    assert "spot from $2.100/h (AWS eu-west-1 p5.4xlarge); 3 offers." in page  # not the 8-GPU one
    assert "$3.500/h, is 17% over the cheapest on-demand." in page
    [asked] = catalog_sky.asked  # once: the second look read the cache
    assert asked["name_filter"] == "^H100$" and asked["quantity_filter"] == 1
    assert asked["clouds"] is None


def test_the_catalog_is_read_where_the_type_may_run_and_spot_is_compared_for_spot(catalog_sky):
    gpu = GpuType(
        slug="h100-spot",
        name="H100 spot",
        vram_gb=80,
        hourly_price=Decimal("2.00"),
        provider="skypilot",
        provider_options={"accelerators": "H100", "infra": "aws/us-east-1", "use_spot": True},
    )
    cloud_prices.catalog_read(gpu.provider_options)
    line = cloud_prices.catalog_summary(gpu)
    assert "on-demand from $6.880/h (AWS us-east-1 p5.4xlarge)" in line
    assert "spot from $2.750/h (AWS us-east-1 p5.4xlarge); 1 offers." in line
    assert "$2.00/h, is 27% under the cheapest spot." in line
    assert catalog_sky.asked[-1]["clouds"] == ["aws"]


def test_a_catalog_that_cannot_be_read_is_said_and_asked_again_later(catalog_sky):
    catalog_sky.answer = RuntimeError("Could not connect to SkyPilot API server")
    gpu = GpuType(
        slug="l4",
        name="L4",
        vram_gb=24,
        hourly_price=Decimal("0.80"),
        provider="skypilot",
        provider_options={"accelerators": "L4"},
    )
    cloud_prices.catalog_read(gpu.provider_options)
    line = cloud_prices.catalog_summary(gpu)
    assert line == (
        "SkyPilot's catalog could not be read: SkyPilot could not read its GPU price catalog: "
        "Could not connect to SkyPilot API server"
    )
    assert cloud_prices.catalog_summary(gpu) == line
    assert len(catalog_sky.asked) == 1  # kept for FAILED_SECONDS, not asked on every look


def test_without_skypilot_installed_the_page_says_so(admin_client, monkeypatch):
    monkeypatch.setattr(sky_sdk, "installed", lambda: False)
    h100 = GpuType.objects.get(slug="h100-80gb")
    h100.provider_options = {"accelerators": "H100"}
    h100.save()
    page = admin_client.get(f"/admin/training/gputype/{h100.pk}/change/").content.decode()
    assert "SkyPilot is not installed on this server" in page


@pytest.mark.skipif(
    not sky_sdk.installed(), reason="SkyPilot is not installed here (pip install -e '.[cloud]')"
)
def test_the_real_sdk_without_an_api_server_says_why_there_is_no_price(monkeypatch, tmp_path):
    """SkyPilot 0.14's own client, with no API server to ask (CI runs it in the cloud extra's
    environment): the catalog line says why, and nothing waits."""
    monkeypatch.setenv("SKYPILOT_DISABLE_LOCAL_API_SERVER", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SKYPILOT_API_SERVER_ENDPOINT", raising=False)
    found = cloud_prices.catalog_read({"accelerators": "H100"})
    assert found.offers == 0
    assert "No SkyPilot API server endpoint is configured" in found.error
