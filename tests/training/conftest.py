"""Training fixtures: real images from ../shared/datasets and real Celery workers on this
suite's training queue (the helpers they use are in tests/training/helpers.py)."""

import pytest

from tests.training.helpers import SHARED, single_class_copy, version_of
from tests.workers import Workers
from training.models import GpuType
from training.services.catalog import gpu_catalog_seed
from workspaces.models import Project


@pytest.fixture
def gpu_local(db) -> GpuType:
    gpu_catalog_seed()
    return GpuType.objects.get(slug="local")


@pytest.fixture
def project(team) -> Project:
    return Project.objects.create(workspace=team.workspace, name="Detector", created_by=team.owner)


@pytest.fixture
def detect_version(team, tmp_path):
    folder = single_class_copy(SHARED / "coco8", tmp_path / "coco8-one")
    return version_of(
        user=team.owner, workspace=team.workspace, folder=folder, task="detect", name="coco8"
    )


@pytest.fixture
def workers(transactional_db):
    w = Workers()
    yield w
    w.stop_all()


class _EveryType(dict):
    """SkyPilot options for whatever type is asked about."""

    def get(self, slug, default=None):
        return {"accelerators": slug.upper()}


@pytest.fixture
def skypilot_ready(settings, monkeypatch):
    """SkyPilot as an operator has it: installed (said at importlib's edge, since it is not
    installed here), told what to rent for every type of the catalogue, and the address
    trainers reach Kestrel at. Only what the form offers depends on it; nothing is launched."""
    import importlib.util

    settings.TRAINING_PROVIDERS = ["local", "skypilot"]
    settings.TRAINING_SKYPILOT_TYPES = _EveryType()
    settings.TRAINING_EVENTS_URL = "https://kestrel.example.com"
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: object() if name == "sky" else found(name, *args),
    )
