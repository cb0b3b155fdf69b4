"""The job page as a live monitor, as the server draws it: header, buttons per state, the data
its script starts from, the results of a finished run, and the full log download.

Rows are written directly (tests/training/factories.py): no worker runs here. The live part
(charts, console, progress fed by the event stream) is tested in the browser,
tests/browser/test_job_live_page.py.
"""

import html
import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from datasets.models import DatasetClass
from tests.training.factories import (
    job_row,
    job_with_results,
    local_gpu,
    small_version,
)
from training.models import JobState, LogChunk, TrainingJob
from training.streams import progress_key, training_redis
from workspaces.models import Project

pytestmark = pytest.mark.django_db


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _section(page: str, testid: str) -> str:
    match = re.search(rf'<[a-z]+ [^>]*data-testid="{testid}".*?</(section|table|div)>', page, re.S)
    assert match, f"no {testid} on the page"
    return match.group(0)


def _tag(page: str, testid: str) -> str:
    """The opening tag of the element with this data-testid."""
    match = re.search(rf'<[a-z]+ [^>]*data-testid="{testid}"[^>]*>', page)
    assert match, f"no {testid} on the page"
    return match.group(0)


def _title(page: str) -> str:
    return html.unescape(re.search(r"<title>(.*?)</title>", page, re.S).group(1)).strip()


def _live_data(page: str) -> dict:
    match = re.search(
        r'<script id="job-live-data" type="application/json">(.*?)</script>', page, re.S
    )
    assert match, "no job-live-data on the page"
    return json.loads(match.group(1))


@pytest.fixture
def setup(team):
    access = team.access("owner")
    project = Project.objects.create(workspace=team.workspace, name="Birds", created_by=team.owner)
    return project, small_version(access=access), local_gpu()


def test_a_queued_job_shows_its_state_buttons_and_where_its_events_come_from(client, team, setup):
    project, version, gpu = setup
    job = job_row(project=project, version=version, gpu=gpu, name="baseline")
    client.force_login(team.editor)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()

    assert _title(page) == "Queued · baseline · Kestrel"
    assert 'data-testid="job-state">Queued</span>' in page
    assert 'data-state="queued"' in _tag(page, "job-status")
    assert "Waiting for a machine. Epoch 0 of 3." in html.unescape(page)
    assert "hidden" in _tag(page, "job-elapsed-wrap")  # not started: no clock
    # Stop and Cancel are shown; Resume is in the page for later, hidden.
    assert "hidden" not in _tag(page, "job-stop-form")
    assert "hidden" not in _tag(page, "job-cancel")
    assert "hidden" in _tag(page, "job-resume-form")
    assert "Results appear when the run ends." in page
    assert "hx-trigger" not in page  # the stream replaced polling
    data = _live_data(page)
    assert data["events_url"] == f"/w/acme/jobs/{job.pk}/events"
    assert data["job"]["state"] == "queued" and data["job"]["is_final"] is False
    assert data["epochs"] == [] and data["logs"] == [] and data["progress"] is None
    assert data["title"] == "baseline"
    assert 'data-default-tab="charts"' in page


def test_a_running_job_shows_its_epoch_in_the_title_and_its_batch(client, team, setup):
    project, version, gpu = setup
    job = job_row(
        project=project,
        version=version,
        gpu=gpu,
        name="long run",
        state=JobState.RUNNING,
        attempts=1,
        epochs=50,
        started_at=timezone.now() - timedelta(minutes=3, seconds=5),
        device="CPU (test)",
    )
    redis = training_redis()
    batch = {"epoch": 3, "epochs": 50, "batch": 7, "batches": 20, "batch_size": 16, "loss": [1.5]}
    redis.set(progress_key(job.pk), json.dumps(batch), ex=60)
    try:
        client.force_login(team.viewer)
        page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    finally:
        redis.delete(progress_key(job.pk))

    assert _title(page) == "Epoch 3/50 · long run · Kestrel"
    assert "Epoch 3 of 50 · batch 7 of 20 · loss 1.500" in html.unescape(page)
    assert 'value="7"' in _tag(page, "job-epoch-bar") and 'max="20"' in _tag(page, "job-epoch-bar")
    assert re.search(r'data-testid="job-elapsed">3:0[5-9]</time>', page)
    assert ">CPU (test)</span>" in page
    assert _live_data(page)["progress"] == batch
    # A viewer has no buttons at all, whatever the state becomes.
    for testid in ("job-stop-form", "job-cancel", "job-resume-form"):
        assert f'data-testid="{testid}"' not in page


@pytest.mark.parametrize(
    ("state", "fields", "shown", "hidden"),
    [
        (JobState.RUNNING, {}, ["job-stop-form", "job-cancel"], ["job-resume-form"]),
        (JobState.STOPPING, {}, ["job-cancel"], ["job-stop-form", "job-resume-form"]),
        (JobState.STOPPED, {"checkpoint_epoch": 1}, ["job-resume-form"], []),
        (JobState.FAILED, {"checkpoint_epoch": 3}, [], ["job-resume-form"]),  # trained out
        (JobState.CANCELED, {}, [], []),
    ],
)
def test_buttons_follow_the_state(client, team, setup, state, fields, shown, hidden):
    project, version, gpu = setup
    job = job_row(project=project, version=version, gpu=gpu, state=state, **fields)
    client.force_login(team.editor)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    for testid in shown:
        assert "hidden" not in _tag(page, testid), testid
    for testid in hidden:
        assert "hidden" in _tag(page, testid), testid
    if job.is_final:  # a final job never comes back without a page load: no Stop, no Cancel
        assert "Stop</button>" not in page and "Cancel…" not in page
    absent = {"job-stop-form", "job-cancel", "job-resume-form"} - {*shown, *hidden}
    for testid in absent:
        assert f'data-testid="{testid}"' not in page, testid


def test_a_finished_job_shows_its_results(client, team, setup):
    project, version, gpu = setup
    job = job_with_results(project=project, version=version, gpu=gpu, user=team.owner)
    bird = DatasetClass.objects.get(dataset=version.dataset, name="bird")
    client.force_login(team.viewer)
    response = client.get(_url("job_detail", pk=job.pk))
    assert response.status_code == 200
    page = response.content.decode()
    assert _title(page) == "Succeeded · Finished run · Kestrel"
    assert 'data-default-tab="results"' in page
    assert "Results appear when the run ends." not in page
    gallery = reverse("dataset_gallery", kwargs={"ws_slug": "acme", "pk": version.dataset_id})
    bird_link = f'<a href="{gallery}?class={bird.pk}">bird</a>'

    final = _section(page, "results-final")
    assert re.search(r"mAP50 <small[^>]*>\(box\)</small></th><td>0.6000</td>", final)
    assert re.search(r"mAP50-95 <small[^>]*>\(box\)</small></th><td>0.5000</td>", final)

    per_class = _section(page, "results-per-class")
    heads = re.findall(r"<th scope=\"col\"[^>]*>(.*?)</th>", per_class)
    assert heads == ["Class", "Images", "Instances", "Precision", "Recall", "mAP50", "mAP50-95"]
    rows = re.findall(r"<tr><th scope=\"row\">(.*?)</th>(.*?)</tr>", per_class)
    assert rows[0][0] == bird_link
    assert re.findall(r">([^<]+)</td>", rows[0][1]) == [
        "4",
        "10",
        "0.900",
        "0.800",
        "0.700",
        "0.500",
    ]
    assert rows[1][0] == "cat"  # no such class in the dataset any more: no link
    assert re.findall(r">([^<]+)</td>", rows[1][1])[:2] == ["2", "3"]

    matrix = _section(page, "results-confusion")
    assert bird_link in matrix and ">cat</th>" in matrix and ">background</th>" in matrix
    assert matrix.count(f"?class={bird.pk}") == 2  # its column and its row
    shades = re.findall(r'<td class="(cm-\d)( cm-diag)?">(\d+)</td>', matrix)
    assert len(shades) == 9
    # 8 of the 10 true birds predicted bird: a dark shade; nothing is cm-0 but zeros.
    assert shades[0] == ("cm-7", " cm-diag", "8")
    assert all((shade == "cm-0") == (value == "0") for shade, _, value in shades)

    curves = _section(page, "results-curves")
    for name in ("BoxPR_curve.png", "BoxF1_curve.png", "confusion_matrix_normalized.png"):
        assert f'<img src="{_url("job_artifact", pk=job.pk, name=name)}"' in curves
    strip = _section(page, "results-val-images")
    pred = strip.index(_url("job_artifact", pk=job.pk, name="val_batch0_pred.jpg"))
    true = strip.index(_url("job_artifact", pk=job.pk, name="val_batch0_labels.jpg"))
    assert pred < strip.index("<figcaption>predicted</figcaption>") < true
    assert strip.index("<figcaption>true</figcaption>") > true
    # The images shown in the results are not listed again with the other files.
    files = _section(page, "job-artifacts")
    assert "last.pt" in files and "results.png" in files and "val_batch0_pred.jpg" not in files
    # No buttons for a succeeded job, and the run is not followed any more.
    assert "Stop</button>" not in page and "Resume</button>" not in page
    assert _live_data(page)["job"]["is_final"] is True
    assert [e["epoch"] for e in _live_data(page)["epochs"]] == [1, 2, 3]


def test_a_job_that_ended_without_results_says_so(client, team, setup):
    project, version, gpu = setup
    job = job_row(project=project, version=version, gpu=gpu, state=JobState.CANCELED)
    client.force_login(team.viewer)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    assert "No results: the run ended before its final validation." in page
    assert _title(page) == f"Canceled · Job {job.pk} · Kestrel"


def test_the_console_starts_from_the_log_raw_for_the_script_and_plain_without_it(
    client, team, setup
):
    project, version, gpu = setup
    job = job_with_results(project=project, version=version, gpu=gpu)
    client.force_login(team.viewer)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    logs = _live_data(page)["logs"]
    assert logs[0] == "Starting training for 3 epochs..."
    assert "\x1b[34m\x1b[1mtrain:\x1b[0m Scanning labels... 4 images, 0 backgrounds" in logs
    noscript = re.search(r"<noscript><pre class=\"log\">(.*?)</pre>", page, re.S).group(1)
    assert "train: Scanning labels" in noscript and "\x1b" not in noscript
    assert "&lt;b&gt;not bold&lt;/b&gt;" in noscript
    assert "<b>not bold</b>" not in page  # escaped in the JSON too
    assert f'href="{_url("job_log", pk=job.pk)}" download' in page


def test_no_inline_script_or_style(client, team, setup):
    project, version, gpu = setup
    job = job_with_results(project=project, version=version, gpu=gpu)
    client.force_login(team.viewer)
    response = client.get(_url("job_detail", pk=job.pk))
    page = response.content.decode()
    scripts = re.findall(r"<script([^>]*)>", page)
    assert len(scripts) >= 4
    for attributes in scripts:
        assert "src=" in attributes or 'type="application/json"' in attributes, attributes
    assert "<style" not in page and " style=" not in page
    assert " on" not in "".join(re.findall(r"<[a-z]+( on\w+=)", page))
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy


# --- the full log --------------------------------------------------------------------------------


def test_the_full_log_downloads_in_order_without_colours(client, team, stranger, setup):
    project, version, gpu = setup
    job = job_row(project=project, version=version, gpu=gpu, state=JobState.SUCCEEDED)
    # Written out of order: attempt 2 first, seq 2 before seq 1.
    LogChunk.objects.create(job=job, attempt=2, seq=1, text="third\n\x1b[31mfourth\x1b[0m")
    LogChunk.objects.create(job=job, attempt=1, seq=2, text="second")
    LogChunk.objects.create(job=job, attempt=1, seq=1, text="\x1b[34m\x1b[1mfirst\x1b[0m")
    other = job_row(project=project, version=version, gpu=gpu)
    LogChunk.objects.create(job=other, attempt=1, seq=1, text="someone else's")
    for role in ("owner", "viewer"):
        client.force_login(team.user(role))
        response = client.get(_url("job_log", pk=job.pk))
        assert response.status_code == 200
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response["Content-Disposition"] == f'attachment; filename="job-{job.pk}-log.txt"'
        text = response.content.decode()
        assert text == "first\nsecond\nthird\nfourth\n"

    client.force_login(stranger)
    assert client.get(_url("job_log", pk=job.pk)).status_code == 404
    own = reverse("job_log", kwargs={"ws_slug": "elsewhere", "pk": job.pk})
    assert client.get(own).status_code == 404
    assert TrainingJob.objects.count() == 2
