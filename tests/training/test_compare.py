"""A project's runs side by side: the sortable runs table on the project page, the compare page
(overlay charts and the arguments diff), and promoting a model to the project's current one.

Runs are rows written directly, with the epochs, times and machines each test needs.
"""

import html
import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.training.factories import finished_job, job_row, local_gpu, small_version
from training import selectors
from training.models import EpochMetric, GpuType, JobState, TrainedModel
from training.services.models import model_promote
from workspaces.models import Project
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _text(response) -> str:
    return html.unescape(response.content.decode())


def _section(page: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}".*?</section>', page, re.S)
    assert match, f"no {testid} on the page"
    return match.group(0)


def _row_ids(page: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'data-testid="run-row" data-job="(\d+)"', page)]


def _run_cells(page: str, testid: str) -> dict[str, str]:
    """Run title → the text of its cell `testid`, from the project page's runs table."""
    cells = {}
    for row in re.findall(r'<tr data-testid="run-row".*?</tr>', page, re.S):
        title = re.search(r'<td><a href="[^"]*">(.*?)</a>', row).group(1)
        cell = re.search(rf'data-testid="{testid}">(.*?)</td>', row, re.S).group(1)
        cells[title] = re.sub(r"<[^>]+>", "", cell)
    return cells


def _epochs(job, values: list[dict]) -> None:
    for epoch, v in enumerate(values, start=1):
        EpochMetric.objects.create(job=job, epoch=epoch, attempt=1, values=v)


def _compare(client, project, *ids) -> object:
    return client.get(_url("project_compare", pk=project.pk), {"jobs": [str(i) for i in ids]})


@pytest.fixture
def gpus(db) -> dict[str, GpuType]:
    local = local_gpu()  # seeds the catalog: local is free, h200 and b200 are priced
    return {
        "local": local,
        **{g.slug: g for g in GpuType.objects.filter(slug__in=["h200", "b200"])},
    }


@pytest.fixture
def version(team):
    return small_version(access=team.access("owner"), name="Birds")


# --- the runs table ----------------------------------------------------------------------------


@pytest.fixture
def three_runs(team, project, gpus):
    """Three runs whose every column orders them differently (see ASCENDING)."""
    access = team.access("owner")
    now = timezone.now()
    alpha = job_row(
        project=project,
        version=small_version(access=access, name="Birds"),
        gpu=gpus["h200"],
        name="alpha",
        state=JobState.SUCCEEDED,
        model_family="yolo11",
        model_size="s",
        epochs=3,
        epochs_done=3,
        imgsz=320,
        started_at=now - timedelta(minutes=10),
        finished_at=now,
    )
    _epochs(alpha, [{"metrics/mAP50-95(B)": 0.5}, {"metrics/mAP50-95(B)": 0.7}])
    bravo = job_row(
        project=project,
        version=small_version(access=access, name="zebras"),
        gpu=gpus["local"],
        name="Bravo",
        state=JobState.RUNNING,
        model_family="yolo11",
        model_size="m",
        epochs=10,
        epochs_done=1,
        imgsz=640,
        started_at=now - timedelta(minutes=2),
    )
    _epochs(bravo, [{"metrics/mAP50-95(B)": 0.3}])
    unnamed = job_row(
        project=project,
        version=small_version(access=access, name="apples"),
        gpu=gpus["b200"],
        state=JobState.QUEUED,
        model_family="yolov8",
        model_size="n",
        epochs=5,
        imgsz=64,
    )
    return {"alpha": alpha, "bravo": bravo, "unnamed": unnamed}


# Each column's ascending order; a run with no value (no epoch, not started) comes last both ways.
ASCENDING = {
    "name": ["alpha", "bravo", "unnamed"],  # case-insensitive; “Job 3” for the unnamed one
    "state": ["unnamed", "bravo", "alpha"],  # queued, running, succeeded
    "model": ["alpha", "bravo", "unnamed"],  # yolo11s, yolo11m (n s m l x), yolov8n
    "dataset": ["unnamed", "alpha", "bravo"],  # apples, Birds, zebras
    "epochs": ["unnamed", "bravo", "alpha"],  # 0, 1, 3 done
    "imgsz": ["unnamed", "alpha", "bravo"],  # 64, 320, 640
    "metric": ["bravo", "alpha", "unnamed"],  # 0.3, 0.7, none yet
    "time": ["bravo", "alpha", "unnamed"],  # 2 min so far, 10 min, not started
    "cost": ["bravo", "alpha", "unnamed"],  # free, $0.60, not started
    "created": ["alpha", "bravo", "unnamed"],
}
NO_VALUE_LAST = {"metric", "time", "cost"}


@pytest.mark.parametrize("column", list(ASCENDING))
def test_each_column_sorts_both_ways(client, team, project, three_runs, column):
    client.force_login(team.viewer)
    url = _url("project_detail", pk=project.pk)
    names = {job.pk: name for name, job in three_runs.items()}

    page = _text(client.get(url, {"sort": column, "dir": "asc"}))
    assert [names[pk] for pk in _row_ids(page)] == ASCENDING[column]
    header = re.search(r'<th[^>]*aria-sort="ascending"[^>]*>.*?</th>', page, re.S).group(0)
    assert f'data-testid="sort-{column}"' in header
    assert f"?sort={column}&dir=desc#runs" in header  # clicking again flips it

    page = _text(client.get(url, {"sort": column, "dir": "desc"}))
    expected = list(reversed(ASCENDING[column]))
    if column in NO_VALUE_LAST:
        expected = [*expected[1:], expected[0]]
    assert [names[pk] for pk in _row_ids(page)] == expected
    assert 'aria-sort="descending"' in page


def test_unknown_sort_falls_back_to_newest_first(client, team, project, three_runs):
    client.force_login(team.viewer)
    url = _url("project_detail", pk=project.pk)
    newest_first = [three_runs[n].pk for n in ("unnamed", "bravo", "alpha")]
    for params in ({}, {"sort": "password"}, {"sort": "pk);drop", "dir": "sideways"}):
        response = client.get(url, params)
        assert response.status_code == 200
        assert _row_ids(_text(response)) == newest_first


def test_without_a_direction_best_and_newest_come_first_the_rest_ascending(
    client, team, project, three_runs
):
    client.force_login(team.viewer)
    url = _url("project_detail", pk=project.pk)
    names = {job.pk: name for name, job in three_runs.items()}
    page = _text(client.get(url, {"sort": "metric"}))
    assert [names[pk] for pk in _row_ids(page)] == ["alpha", "bravo", "unnamed"]
    page = _text(client.get(url, {"sort": "imgsz", "dir": "sideways"}))
    assert [names[pk] for pk in _row_ids(page)] == ASCENDING["imgsz"]


def test_ties_keep_a_stable_order(client, team, project, version, gpus):
    jobs = [
        job_row(project=project, version=version, gpu=gpus["local"], imgsz=64) for _ in range(4)
    ]
    client.force_login(team.viewer)
    url = _url("project_detail", pk=project.pk)
    ids = [j.pk for j in jobs]
    assert _row_ids(_text(client.get(url, {"sort": "imgsz", "dir": "asc"}))) == ids
    assert _row_ids(_text(client.get(url, {"sort": "imgsz", "dir": "desc"}))) == ids[::-1]


def test_the_table_shows_every_column(client, team, project, three_runs):
    client.force_login(team.editor)
    page = _text(client.get(_url("project_detail", pk=project.pk)))
    table = _section(page, "project-jobs")
    alpha = re.search(rf'data-job="{three_runs["alpha"].pk}".*?</tr>', table, re.S).group(0)
    for shown in ("alpha", "Succeeded", "yolo11s", "Birds v1", "3 / 3", "320", "0.700"):
        assert shown in alpha, shown
    assert "10 min 00 s" in alpha and "$0.60" in alpha  # 10 min on an H200 at $3.59/hour
    assert f'name="jobs" value="{three_runs["alpha"].pk}"' in alpha
    unnamed = re.search(rf'data-job="{three_runs["unnamed"].pk}".*?</tr>', table, re.S).group(0)
    assert f"Job {three_runs['unnamed'].pk}" in unnamed and "0 / 5" in unnamed
    assert re.search(r'data-testid="run-time">—<', unnamed)
    assert re.search(r'data-testid="run-cost">—<', unnamed)
    assert _url("project_compare", pk=project.pk) in table and "Compare selected" in table


# --- best metric, time and cost ----------------------------------------------------------------


def test_best_metric_is_the_task_s_main_one_over_all_epochs(team, project, version, gpus):
    gpu = gpus["local"]
    cases = {
        "detect": (
            [
                {"metrics/mAP50(B)": 0.9, "metrics/mAP50-95(B)": 0.41},
                {"metrics/mAP50(B)": 0.8, "metrics/mAP50-95(B)": 0.52},
                {"metrics/mAP50(B)": 0.95, "metrics/mAP50-95(B)": 0.48},
            ],
            0.52,
        ),
        "obb": ([{"metrics/mAP50-95(B)": 0.33}, {"metrics/mAP50-95(B)": 0.31}], 0.33),
        "segment": (
            [
                {"metrics/mAP50-95(B)": 0.7, "metrics/mAP50-95(M)": 0.45},
                {"metrics/mAP50-95(B)": 0.8, "metrics/mAP50-95(M)": 0.44},
            ],
            0.45,
        ),
        "pose": (
            [
                {"metrics/mAP50-95(B)": 0.9, "metrics/mAP50-95(P)": 0.25},
                {"metrics/mAP50-95(P)": 0.2},
            ],
            0.25,
        ),
        "classify": (
            [
                {"metrics/accuracy_top1": 0.61, "metrics/accuracy_top5": 0.99},
                {"metrics/accuracy_top1": 0.75, "metrics/accuracy_top5": 1.0},
            ],
            0.75,
        ),
    }
    jobs = {}
    for task, (values, _) in cases.items():
        jobs[task] = job_row(project=project, version=version, gpu=gpu, task=task, name=task)
        _epochs(jobs[task], values)
    job_row(project=project, version=version, gpu=gpu, name="no epochs yet")

    runs = selectors.project_runs(workspace=team.workspace, project=project)
    best = {job.name: job.best_main for job in runs}
    for task, (_, expected) in cases.items():
        assert best[task] == pytest.approx(expected), task
    assert best["no epochs yet"] is None

    client = Client()
    client.force_login(team.viewer)
    page = _text(client.get(_url("project_detail", pk=project.pk)))
    assert _run_cells(page, "run-metric") == {
        "detect": "0.520",
        "obb": "0.330",
        "segment": "0.450 mask",
        "pose": "0.250 pose",
        "classify": "0.750 top-1",
        "no epochs yet": "—",
    }


def test_time_and_cost(client, team, project, version, gpus):
    now = timezone.now()
    runs = {
        "ninety minutes on an H200": dict(
            gpu=gpus["h200"],
            state=JobState.SUCCEEDED,
            started_at=now - timedelta(minutes=90),
            finished_at=now,
        ),
        "five seconds on an H200": dict(
            gpu=gpus["h200"],
            state=JobState.FAILED,
            started_at=now - timedelta(seconds=5),
            finished_at=now,
        ),
        "an hour here": dict(
            gpu=gpus["local"],
            state=JobState.SUCCEEDED,
            started_at=now - timedelta(hours=1),
            finished_at=now,
        ),
        "running on a B200": dict(
            gpu=gpus["b200"], state=JobState.RUNNING, started_at=now - timedelta(minutes=30)
        ),
        "waiting": dict(gpu=gpus["b200"], state=JobState.QUEUED),
    }
    for name, fields in runs.items():
        job_row(project=project, version=version, name=name, **fields)
    by_name = {j.name: j for j in selectors.project_runs(workspace=team.workspace, project=project)}
    assert by_name["ninety minutes on an H200"].training_seconds == pytest.approx(5400)
    assert by_name["ninety minutes on an H200"].cost == Decimal("5.385")
    assert by_name["running on a B200"].training_seconds >= 1800  # so far, and counting
    assert by_name["waiting"].training_seconds is None and by_name["waiting"].cost is None

    client.force_login(team.viewer)
    page = _text(client.get(_url("project_detail", pk=project.pk)))

    times, costs = _run_cells(page, "run-time"), _run_cells(page, "run-cost")

    def cells(name: str) -> tuple[str, str]:
        return times[name], costs[name]

    assert cells("ninety minutes on an H200") == ("1 h 30 min", "$5.39")
    assert cells("five seconds on an H200") == ("5 s", "< $0.01")
    assert cells("an hour here") == ("1 h 00 min", "free")
    time, cost = cells("running on a B200")
    assert time.startswith("30 min") and cost == "$2.99"  # 30 min at $5.98/hour
    assert cells("waiting") == ("—", "—")


def test_project_page_queries_do_not_grow_with_runs(
    client, team, project, version, gpus, django_assert_num_queries, django_assert_max_num_queries
):
    def add_runs(n: int) -> None:
        for _ in range(n):
            job = finished_job(project=project, version=version, gpu=gpus["h200"])
            job.model.is_current = not TrainedModel.objects.filter(is_current=True).exists()
            job.model.save(update_fields=["is_current"])

    add_runs(2)
    client.force_login(team.editor)
    url = _url("project_detail", pk=project.pk)
    with django_assert_max_num_queries(30) as two:
        response = client.get(url, {"sort": "metric"})
    assert len(_row_ids(_text(response))) == 2
    add_runs(6)
    with django_assert_num_queries(len(two.captured_queries)):
        response = client.get(url, {"sort": "metric"})
    page = _text(response)
    assert len(_row_ids(page)) == 8
    assert page.count('data-testid="model-row"') == 8


# --- the compare page --------------------------------------------------------------------------


@pytest.fixture
def two_runs(team, project, version, gpus):
    first = finished_job(project=project, version=version, gpu=gpus["local"])
    second = finished_job(project=project, version=version, gpu=gpus["h200"])
    first.name, first.extra_args = "small images", {"lr0": 0.01}
    second.name, second.imgsz = "big images", 320
    second.extra_args = {"lr0": 0.02, "mosaic": 0.0}
    first.save(update_fields=["name", "extra_args"])
    second.save(update_fields=["name", "imgsz", "extra_args"])
    EpochMetric.objects.filter(job=second).delete()
    _epochs(
        second,
        [
            {"metrics/mAP50-95(B)": 0.1, "val/box_loss": 2.0, "val/cls_loss": 1.0},
            {"metrics/mAP50-95(B)": 0.3, "val/box_loss": 1.5, "val/cls_loss": 0.5},
            {"metrics/mAP50-95(B)": 0.6, "val/box_loss": 1.0, "val/cls_loss": 0.25},
            {"metrics/mAP50-95(B)": 0.65, "val/box_loss": 0.75, "val/cls_loss": 0.25},
        ],
    )
    return first, second


def test_compare_two_runs_charts_and_arguments(client, team, project, two_runs):
    first, second = two_runs
    client.force_login(team.viewer)
    response = _compare(client, project, second.pk, first.pk)
    assert response.status_code == 200
    page = _text(response)

    data = json.loads(
        re.search(
            r'<script id="compare-data" type="application/json">(.*?)</script>', page, re.S
        ).group(1)
    )
    assert data["metric_label"] == "mAP50-95"
    assert [r["label"] for r in data["runs"]] == ["big images", "small images"]  # as ticked
    big, small = data["runs"]
    assert big["epochs"] == [1, 2, 3, 4] and small["epochs"] == [1, 2, 3]
    assert big["metric"] == [0.1, 0.3, 0.6, 0.65]
    assert big["val_loss"] == [3.0, 2.0, 1.25, 1.0]
    assert small["metric"] == pytest.approx([0.3, 0.4, 0.5])  # metrics_of(epoch) in factories
    assert small["val_loss"] == pytest.approx([(1.6 - e / 10) + (2.6 - e / 10) for e in (1, 2, 3)])
    assert "compare.js" in page and "chart.umd.min.js" in page
    assert 'id="chart-metric"' in page and 'id="chart-val-loss"' in page

    rows = dict(re.findall(r'data-arg="([^"]+)" data-differs="(true|false)"', page))
    assert rows["imgsz"] == "true" and rows["machine"] == "true"
    assert rows["lr0"] == "true" and rows["mosaic"] == "true"
    for same in ("epochs", "batch", "patience", "optimizer", "seed", "model", "weights"):
        assert rows[same] == "false", same
    assert rows["dataset version"] == "false"
    differ = _section(page, "compare-args").split('data-testid="args-same"')[0]
    assert re.search(
        r'class="differs"[^>]*data-arg="imgsz".*?<td>320</td><td>64</td>', differ, re.S
    )
    assert re.search(r'data-arg="mosaic".*?<td>0.0</td><td>—</td>', differ, re.S)
    assert "<details" in page and "arguments are the same in every run" in page

    summary = _section(page, "compare-runs")
    assert "0.650" in summary and "0.500" in summary  # each run's best mAP50-95
    assert "free" in summary and "$0.30" in summary  # 5 min on an H200


@pytest.mark.parametrize(
    ("ticked", "message"),
    [
        ([], "Tick at least 2 runs to compare."),
        (["@0"], "Tick at least 2 runs to compare; you ticked 1."),
        (["@0", "@0"], "Tick at least 2 runs to compare; you ticked 1."),
        (["@0", "abc"], "“abc” is not a run id."),
        (["@0", "99999999999999999"], "Run 99999999999999999 is not a run of Detector."),
    ],
)
def test_bad_compare_requests_say_why(client, team, project, two_runs, ticked, message):
    ids = [two_runs[int(t[1:])].pk if t.startswith("@") else t for t in ticked]
    client.force_login(team.viewer)
    response = _compare(client, project, *ids)
    assert response.status_code == 400
    assert message in _text(response)
    assert "compare-data" not in response.content.decode()
    assert _url("project_detail", pk=project.pk) in _text(response)


def test_compare_at_most_eight_runs(client, team, project, version, gpus):
    jobs = [job_row(project=project, version=version, gpu=gpus["local"]) for _ in range(9)]
    client.force_login(team.viewer)
    response = _compare(client, project, *[j.pk for j in jobs])
    assert response.status_code == 400
    assert "Compare at most 8 runs at once; you ticked 9." in _text(response)
    assert _compare(client, project, *[j.pk for j in jobs[:8]]).status_code == 200


def test_runs_of_another_project_or_workspace_are_refused(
    client, team, stranger, project, version, gpus, two_runs
):
    other_project = Project.objects.create(workspace=team.workspace, name="Other")
    theirs = job_row(project=other_project, version=version, gpu=gpus["local"])
    elsewhere = Project.objects.create(workspace=stranger.memberships.get().workspace, name="X")
    foreign = job_row(project=elsewhere, version=version, gpu=gpus["local"])
    client.force_login(team.viewer)
    response = _compare(client, project, two_runs[0].pk, theirs.pk)
    assert response.status_code == 400
    assert f"Run {theirs.pk} is not a run of Detector." in _text(response)
    response = _compare(client, project, two_runs[0].pk, theirs.pk, foreign.pk)
    assert response.status_code == 400
    assert f"Runs {theirs.pk}, {foreign.pk} are not runs of Detector." in _text(response)
    # A project of another workspace, even with the stranger's own runs: 404.
    response = _compare(client, elsewhere, foreign.pk, theirs.pk)
    assert response.status_code == 404


def test_a_stranger_gets_404(client, stranger, project, two_runs):
    client.force_login(stranger)
    response = _compare(client, project, *[j.pk for j in two_runs])
    assert response.status_code == 404
    assert "small images" not in _text(response)


# --- promoting a model ---------------------------------------------------------------------------


@pytest.fixture
def two_models(project, version, gpus):
    return [
        finished_job(project=project, version=version, gpu=gpus["local"]).model for _ in range(2)
    ]


def _current(project) -> list[int]:
    return list(
        TrainedModel.objects.filter(project=project, is_current=True).values_list("pk", flat=True)
    )


def test_promote_keeps_one_current_model_per_project(team, project, version, gpus, two_models):
    first, second = two_models
    other_project = Project.objects.create(workspace=team.workspace, name="Other")
    theirs = finished_job(project=other_project, version=version, gpu=gpus["local"]).model
    access = team.access("editor")
    model_promote(access=access, model=theirs)

    model_promote(access=access, model=first)
    assert _current(project) == [first.pk]
    model_promote(access=access, model=second)
    assert _current(project) == [second.pk]
    model_promote(access=access, model=second)  # again: nothing changes
    assert _current(project) == [second.pk]
    assert _current(other_project) == [theirs.pk]  # other projects keep theirs


def test_a_viewer_cannot_promote(client, team, project, two_models):
    with pytest.raises(PermissionDenied):
        model_promote(access=team.access("viewer"), model=two_models[0])
    client.force_login(team.viewer)
    response = client.post(_url("model_promote", pk=two_models[0].pk))
    assert response.status_code == 403
    assert _current(project) == []
    for url in (_url("project_detail", pk=project.pk), _url("model_detail", pk=two_models[0].pk)):
        assert "Make current" not in _text(client.get(url))


def test_promote_from_the_project_page_and_the_model_page(client, team, project, two_models):
    first, second = two_models
    client.force_login(team.editor)
    project_url = _url("project_detail", pk=project.pk)
    page = _text(client.get(project_url))
    assert f'data-testid="promote-{first.pk}"' in page and 'data-testid="current-badge"' not in page

    response = client.post(_url("model_promote", pk=first.pk), {"next": project_url})
    assert response.status_code == 302 and response["Location"] == project_url
    page = _text(client.get(project_url))
    models = _section(page, "project-models")
    row = re.search(rf'data-model="{first.pk}".*?</tr>', models, re.S).group(0)
    assert 'data-testid="current-badge"' in row and "Make current" not in row
    assert f"{first.name} is now the current model of Detector." in page
    assert models.count('data-testid="current-badge"') == 1

    # From the model page; a `next` off this site is ignored.
    response = client.post(_url("model_promote", pk=second.pk), {"next": "https://evil.test/"})
    assert response["Location"] == _url("model_detail", pk=second.pk)
    page = _text(client.get(_url("model_detail", pk=second.pk)))
    assert 'data-testid="current-badge"' in page and 'data-testid="promote-button"' not in page
    page = _text(client.get(_url("model_detail", pk=first.pk)))
    assert 'data-testid="current-badge"' not in page and 'data-testid="promote-button"' in page
    assert _current(project) == [second.pk]


def test_promote_a_stranger_s_model_is_404(client, stranger, project, two_models):
    client.force_login(stranger)
    assert client.post(_url("model_promote", pk=two_models[0].pk)).status_code == 404
    assert _current(project) == []


def test_promote_over_the_api(team, project, two_models):
    first, second = two_models
    _, raw = api_key_create(access=team.access("owner"), name="ci", scopes=["read", "train"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    assert api.get(f"/api/v1/models/{first.pk}").json()["is_current"] is False

    response = api.post(f"/api/v1/models/{first.pk}/promote")
    assert response.status_code == 200 and response.json()["is_current"] is True
    response = api.post(f"/api/v1/models/{second.pk}/promote")
    assert response.json()["is_current"] is True
    assert api.get(f"/api/v1/models/{first.pk}").json()["is_current"] is False
    assert _current(project) == [second.pk]

    _, raw = api_key_create(access=team.access("owner"), name="ro", scopes=["read"])
    read_only = Client(headers={"Authorization": f"Bearer {raw}"})
    response = read_only.post(f"/api/v1/models/{first.pk}/promote")
    assert response.status_code == 403
    assert _current(project) == [second.pk]
