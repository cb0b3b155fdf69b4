"""No dedicated endpoint's model server outlives what it served: a test that deploys one and
forgets it (as the journey did: `make test` left its endpoint running, parent pid 1), a deleted
workspace, a deployment no longer meant to run. The process is detached on purpose (it outlives
the worker that started it), so each case is found on this machine by its install's mark."""

import psutil
import pytest

from deploy import supervisor
from deploy.models import Deployment, DeploymentState
from tests.training.factories import trained_model_row
from workspaces.services.workspaces import workspace_delete

pytestmark = pytest.mark.django_db

# The endpoint the first test leaves running, for the next test to look for.
LEFT_RUNNING: dict[str, int] = {}


def _alive(pid: int) -> bool:
    """Running, and still an endpoint (a zombie waiting for its parent counts as ended)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "deploy.inference" in proc.cmdline()
    except psutil.NoSuchProcess:
        return False


def _started(team, settings, tmp_path, slug: str) -> Deployment:
    settings.TRAINING_DIR = tmp_path / "training"  # its log lands here
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    deployment = Deployment.objects.create(
        workspace=team.workspace, model=model, name=slug, slug=slug
    )
    started = supervisor.process_start(deployment)
    assert started.state == DeploymentState.RUNNING, started.last_error
    assert _alive(started.pid)
    assert (started.pid, slug) in supervisor.endpoint_processes()
    return started


def test_a_test_that_leaves_its_endpoint_running(team, settings, tmp_path):
    """Deploys and never stops: what the journey test did. The next test checks the fixture
    of tests/conftest.py ended it when this one ended."""
    LEFT_RUNNING["pid"] = _started(team, settings, tmp_path, "forgotten-abc123").pid


def test_no_endpoint_outlives_the_test_that_started_it():
    if "pid" not in LEFT_RUNNING:
        pytest.skip("runs after test_a_test_that_leaves_its_endpoint_running")
    assert not _alive(LEFT_RUNNING["pid"]), "the previous test's endpoint is still running"
    assert supervisor.endpoint_processes() == []


def test_a_deleted_workspace_s_endpoint_ends_at_the_next_check(team, settings, tmp_path):
    """The rows go with the workspace; the process is on the machine still, found and ended by
    the beat's check (before: it ran on, unknown to every row)."""
    pid = _started(team, settings, tmp_path, "orphan-abc123").pid
    workspace_delete(access=team.access("owner"), confirm_slug="acme")
    assert not Deployment.objects.exists()
    assert _alive(pid)
    supervisor.deployments_check()
    assert not _alive(pid)


def test_a_failed_or_unwanted_deployment_s_process_ends_at_the_next_check(team, settings, tmp_path):
    """A deployment marked failed (or stopped) whose process still runs: the check skipped
    failed deployments, so such a process served, and cost, on."""
    deployment = _started(team, settings, tmp_path, "halted-abc123")
    Deployment.objects.filter(pk=deployment.pk).update(state=DeploymentState.FAILED)
    supervisor.deployments_check()
    assert not _alive(deployment.pid)


def test_the_check_leaves_a_running_deployment_s_process_alone(team, settings, tmp_path):
    deployment = _started(team, settings, tmp_path, "wanted-abc123")
    supervisor.deployments_check()
    deployment.refresh_from_db()
    assert deployment.state == DeploymentState.RUNNING and _alive(deployment.pid)
    assert supervisor.health(deployment)
