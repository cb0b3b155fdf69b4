"""Issue 31, "smaller": every 403 was logged with a traceback.

Django logs a PermissionDenied raised in a view with the exception's traceback: a page of log
per refusal, for what is an answer and not a fault (and a way for anyone with an account to fill
the log). Now it is one line, with the path and the reason (config.log_filters); other errors
keep their traceback.
"""

import logging

import pytest
from django.conf import settings
from django.urls import reverse

from tests.training.factories import job_row, local_gpu, small_version
from tests.workspaces.factories import ProjectFactory

pytestmark = pytest.mark.django_db


def _formatted(record: logging.LogRecord) -> str:
    """The record as the configured console handler writes it."""
    pattern = settings.LOGGING["formatters"]["plain"]["format"]
    return logging.Formatter(pattern).format(record)


def test_a_refused_request_is_one_line_with_its_reason(client, team, caplog):
    project = ProjectFactory(workspace=team.workspace)
    version = small_version(access=team.access("owner"))
    job = job_row(project=project, version=version, gpu=local_gpu(), state="running")
    client.force_login(team.viewer)  # may read, may not stop a job
    url = reverse("job_stop", kwargs={"ws_slug": team.workspace.slug, "pk": job.pk})
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = client.post(url)
    assert response.status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert len(records) == 1
    line = _formatted(records[0])
    assert "\n" not in line and "Traceback" not in line, line
    assert "Forbidden (Permission denied)" in line and url in line
    assert "role" in line  # why it was refused


def test_other_errors_keep_their_traceback(client, caplog, settings):
    settings.ROOT_URLCONF = "tests.security.boom_urls"
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        client.get("/boom/")
    records = [r for r in caplog.records if r.name == "django.request"]
    assert records and "Traceback" in _formatted(records[-1])
