"""Training pages: the form, the job page, actions, downloads, lists, models (the job page's
live parts: tests/training/test_job_page.py and tests/browser/test_job_live_page.py).

Jobs submitted here stay queued: no worker listens on this suite's training queue (and the
on-commit enqueue never fires inside a test transaction). Finished jobs are written as rows.
"""

import html
import re

import pytest
from django.urls import reverse

from tests.training.factories import PNG, WEIGHTS, finished_job, job_row
from tests.training.helpers import SHARED, version_of
from training.models import JobState, TrainingJob
from training.views.job_page import metric_groups

pytestmark = pytest.mark.django_db


def _form(version, gpu, **overrides) -> dict:
    data = {
        "dataset_version": version.pk,
        "task": "",
        "model_family": "yolo11",
        "model_size": "n",
        "weights": "scratch",
        "epochs": 3,
        "imgsz": 64,
        "batch": "auto",
        "patience": 100,
        "optimizer": "auto",
        "seed": 0,
        "gpu_type": gpu.pk,
        "extra_args": "",
        "start": "1",
    }
    data.update(overrides)
    return data


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _text(response) -> str:
    return html.unescape(response.content.decode())


def _machine(page: str, slug: str) -> str:
    match = re.search(rf'<label[^>]*data-testid="machine-{slug}".*?</label>', page, re.S)
    assert match, f"no machine {slug} on the page"
    return match.group(0)


# --- the form ------------------------------------------------------------------------------------


def test_form_lists_versions_and_machines_with_unavailable_ones_disabled(
    client, team, project, detect_version, gpu_local
):
    client.force_login(team.editor)
    response = client.get(_url("job_create", pk=project.pk))
    assert response.status_code == 200
    page = _text(response)
    summary = detect_version.summary
    assert f"coco8 v1 ({summary['images']} images, {summary['labels']} labels)" in page
    local = _machine(page, "local")
    assert "disabled" not in local and "checked" in local and "Available" in local
    h200 = _machine(page, "h200")
    assert "disabled" in h200 and "141 GB" in h200 and "$3.59/hour" in h200
    assert "Its provider, SkyPilot, is not configured on this server." in h200
    for name in ("epochs", "imgsz", "patience", "seed"):
        assert f'name="{name}"' in page
    # A small version from scratch: the small-dataset recipe's numbers (training/recipes.py).
    assert 'name="epochs" value="30"' in page and 'name="imgsz" value="128"' in page
    assert "<details" in page and 'name="extra_args"' in page
    assert 'name="quick_test"' in page and "Start training" in page


@pytest.mark.parametrize(
    ("overrides", "reason", "kept"),
    [
        ({"epochs": 0}, "Epochs must be at least 1.", 'name="epochs" value="0"'),
        ({"imgsz": 100}, "Image size must be a multiple of 32", 'name="imgsz" value="100"'),
        (
            {"batch": "16"},
            "Batch 16 is larger than the 4 training images",
            'name="batch" value="16"',
        ),
        ({"batch": "lots"}, "Batch is “auto” or a whole number", 'name="batch" value="lots"'),
        (
            {"extra_args": "lr00: 0.01"},
            "Unknown argument 'lr00'; did you mean 'lr0'?",
            "lr00: 0.01</textarea>",
        ),
        (
            {"extra_args": "lr0: [0.1, 0.2"},
            "The advanced arguments are not valid YAML",
            "lr0: [0.1, 0.2</textarea>",
        ),
        ({"extra_args": "model: yolo11x.pt"}, "Kestrel sets model itself.", "yolo11x.pt"),
    ],
    ids=["epochs-0", "imgsz-100", "batch-too-big", "batch-word", "unknown-key", "yaml", "model"],
)
def test_each_bad_input_shows_its_reason_and_keeps_the_values(
    client, team, project, detect_version, gpu_local, overrides, reason, kept
):
    client.force_login(team.editor)
    data = _form(detect_version, gpu_local, name="my run", **overrides)
    response = client.post(_url("job_create", pk=project.pk), data)
    assert response.status_code == 400
    page = _text(response)
    assert reason in page
    assert kept in page
    assert 'name="name" value="my run"' in page
    assert TrainingJob.objects.count() == 0


def test_a_version_with_classes_missing_from_val_trains_and_says_what_is_not_measured(
    client, team, project, gpu_local
):
    # coco8 as Ultralytics ships it: most of its train classes never appear in val.
    version = version_of(
        user=team.owner,
        workspace=team.workspace,
        folder=SHARED / "coco8",
        task="detect",
        name="coco8 all classes",
    )
    client.force_login(team.editor)
    # Before submit: the estimate panel of the form, for that version.
    panel = _text(client.get(_url("job_estimate", pk=project.pk), {"dataset_version": version.pk}))
    warning = re.search(r'data-testid="val-warning">(.*?)</p>', panel, re.S)
    assert warning, "the form does not warn of the classes missing from val"
    assert "“zebra”" in warning.group(1) and "no labels in val" in warning.group(1)
    assert "cannot be measured" in warning.group(1)
    assert "move some of their images to val" in warning.group(1)
    # The form lists the same sentence among the version's notes, and starts the job: a
    # warning informs (tests/training/test_data_checks.py).
    form = _text(client.get(_url("job_create", pk=project.pk), {"version": version.pk}))
    assert warning.group(1) in form and 'data-testid="checks-notes"' in form
    data = _form(version, gpu_local)
    response = client.post(_url("job_create", pk=project.pk), data)
    job = TrainingJob.objects.get()
    assert response.status_code == 302 and response.url == _url("job_detail", pk=job.pk)
    page = _text(client.get(response.url))
    shown = re.search(r'data-testid="job-val-warning">(.*?)</p>', page, re.S)
    assert shown and shown.group(1) == warning.group(1)


def test_a_version_with_every_class_in_val_has_no_warning(
    client, team, project, detect_version, gpu_local
):
    client.force_login(team.editor)
    panel = _text(
        client.get(_url("job_estimate", pk=project.pk), {"dataset_version": detect_version.pk})
    )
    assert 'data-testid="estimate-local"' in panel and "val-warning" not in panel
    client.post(_url("job_create", pk=project.pk), _form(detect_version, gpu_local))
    page = _text(client.get(_url("job_detail", pk=TrainingJob.objects.get().pk)))
    assert "job-val-warning" not in page


def test_an_unavailable_machine_is_refused_with_its_reason(
    client, team, project, detect_version, gpu_local
):
    from training.models import GpuType

    h200 = GpuType.objects.get(slug="h200")
    client.force_login(team.editor)
    response = client.post(_url("job_create", pk=project.pk), _form(detect_version, h200))
    assert response.status_code == 400
    assert "Its provider, SkyPilot, is not configured on this server." in _text(response)
    no_machine = _form(detect_version, gpu_local)
    del no_machine["gpu_type"]
    response = client.post(_url("job_create", pk=project.pk), no_machine)
    assert "Pick a machine from the list." in _text(response)
    assert TrainingJob.objects.count() == 0


def test_a_good_submit_queues_the_job_and_shows_its_page(
    client, team, project, detect_version, gpu_local
):
    client.force_login(team.editor)
    data = _form(detect_version, gpu_local, name="baseline", extra_args="lr0: 0.02\nmosaic: 0.5")
    response = client.post(_url("job_create", pk=project.pk), data)
    job = TrainingJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == _url("job_detail", pk=job.pk)
    assert job.state == JobState.QUEUED and not job.is_quick_test
    assert (job.project, job.dataset_version, job.gpu_type) == (project, detect_version, gpu_local)
    assert (job.task, job.model_name, job.epochs, job.imgsz, job.batch) == (
        "detect",
        "yolo11n",
        3,
        64,
        -1,
    )
    assert job.extra_args == {"lr0": 0.02, "mosaic": 0.5}
    assert job.created_by == team.editor and job.name == "baseline"

    page = _text(client.get(response["Location"]))
    assert "baseline" in page and "Queued" in page and "Waiting for a machine" in page
    assert "Training submitted: baseline." in page
    assert f"/w/acme/jobs/{job.pk}/events" in page  # the page follows the job's event stream
    assert "Stop</button>" in page and "Cancel…" in page
    assert re.search(r'<form [^>]*data-testid="job-resume-form" hidden>', page)


def test_the_message_after_a_submit_holds_when_the_job_already_runs(
    client, team, project, detect_version, gpu_local
):
    client.force_login(team.editor)
    response = client.post(_url("job_create", pk=project.pk), _form(detect_version, gpu_local))
    job = TrainingJob.objects.get()
    # A worker took the job between the redirect and the page: the message must still be true.
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    page = _text(client.get(response["Location"]))
    assert f"Training submitted: {job.title}." in page and "Running" in page
    assert "queued" not in page.lower()


def test_a_quick_test_run_trains_two_epochs(client, team, project, detect_version, gpu_local):
    client.force_login(team.editor)
    data = _form(detect_version, gpu_local, epochs=300, quick_test="1")
    del data["start"]
    response = client.post(_url("job_create", pk=project.pk), data)
    assert response.status_code == 302
    job = TrainingJob.objects.get()
    assert job.is_quick_test and job.epochs == 2 and job.name == "Quick test"


def test_viewer_cannot_submit_stop_or_cancel_and_sees_no_buttons(
    client, team, project, detect_version, gpu_local
):
    job = job_row(project=project, version=detect_version, gpu=gpu_local)
    client.force_login(team.viewer)
    assert client.get(_url("job_create", pk=project.pk)).status_code == 403
    response = client.post(_url("job_create", pk=project.pk), _form(detect_version, gpu_local))
    assert response.status_code == 403
    assert client.post(_url("job_stop", pk=job.pk)).status_code == 403
    assert client.post(_url("job_cancel", pk=job.pk)).status_code == 403
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and TrainingJob.objects.count() == 1
    page = _text(client.get(_url("job_detail", pk=job.pk)))
    assert "Queued" in page and "Stop</button>" not in page and "Cancel…" not in page
    project_page = _text(client.get(_url("project_detail", pk=project.pk)))
    assert "Train a model" not in project_page and job.title in project_page


def test_a_stranger_gets_404_everywhere(client, team, stranger, project, detect_version, gpu_local):
    job = finished_job(project=project, version=detect_version, gpu=gpu_local)
    client.force_login(stranger)
    for url in (
        _url("job_create", pk=project.pk),
        _url("job_detail", pk=job.pk),
        _url("job_artifact", pk=job.pk, name="last.pt"),
        _url("model_detail", pk=job.model.pk),
        _url("model_weights", pk=job.model.pk),
        _url("job_list"),
    ):
        assert client.get(url).status_code == 404, url
    # Their own workspace's URL with our job's id: still nothing.
    own = reverse("job_detail", kwargs={"ws_slug": "elsewhere", "pk": job.pk})
    assert client.get(own).status_code == 404
    assert (
        client.post(reverse("job_stop", kwargs={"ws_slug": "elsewhere", "pk": job.pk})).status_code
        == 404
    )


# --- the job page ---------------------------------------------------------------------------------


def test_job_page_shows_metrics_log_attempts_files_and_model(
    client, team, project, detect_version, gpu_local
):
    job = finished_job(project=project, version=detect_version, gpu=gpu_local, user=team.owner)
    client.force_login(team.viewer)
    response = client.get(_url("job_detail", pk=job.pk))
    assert response.status_code == 200
    raw = response.content.decode()
    page = html.unescape(raw)
    assert "Succeeded" in page and "Epoch 3 of 3" in page
    assert gpu_local.description in page  # the machine it ran on
    assert "coco8 v1 (" in page
    # The latest epoch's metrics, by the keys present.
    metrics = re.search(r'data-testid="job-metrics".*?</section>', page, re.S).group(0)
    assert "epoch 3" in metrics
    for label, value in (("Precision", "0.5300"), ("mAP50", "0.6000"), ("mAP50-95", "0.5000")):
        assert re.search(rf"{label} <small[^>]*>\(box\)</small></th><td>{value}</td>", metrics)
    assert re.search(r"box_loss</th><td>1.2000</td><td>1.3000</td>", metrics)
    assert "0.003000 (group 0)" in metrics
    # Attempts.
    attempts = re.search(r'data-testid="job-attempts".*?</section>', page, re.S).group(0)
    assert "worker-a:123" in attempts and "Finished" in attempts and "all good" in attempts
    # The log, escaped.
    assert "&lt;b&gt;not bold&lt;/b&gt;" in raw and "<b>not bold</b>" not in raw
    assert "3 epochs completed in 0.01 hours." in page
    # Files: the checkpoint to download, the plot shown.
    assert (
        'href="{}" download>last.pt'.format(_url("job_artifact", pk=job.pk, name="last.pt")) in raw
    )
    assert '<img src="{}"'.format(_url("job_artifact", pk=job.pk, name="results.png")) in raw
    assert _url("model_detail", pk=job.model.pk) in raw
    # Final: no polling and no actions.
    assert "hx-trigger" not in raw
    assert "Stop</button>" not in page and "Resume</button>" not in page


@pytest.mark.parametrize("action", ["job_stop", "job_cancel"])
def test_stop_or_cancel_of_a_queued_job_cancels_it(
    client, team, project, detect_version, gpu_local, action
):
    job = job_row(project=project, version=detect_version, gpu=gpu_local)
    client.force_login(team.editor)
    response = client.post(_url(action, pk=job.pk))
    assert response.status_code == 302 and response["Location"] == _url("job_detail", pk=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.CANCELED and job.finished_at is not None
    page = _text(client.get(response["Location"]))
    assert "Canceled" in page and "Stop</button>" not in page
    # Again: the reason, not an error page.
    page = _text(client.post(_url(action, pk=job.pk), follow=True))
    assert "has already ended (canceled)" in page


def test_cancel_asks_first(client, team, project, detect_version, gpu_local):
    job = job_row(project=project, version=detect_version, gpu=gpu_local)
    client.force_login(team.editor)
    page = _text(client.get(_url("job_cancel", pk=job.pk)))
    assert "no model is made" in page and 'data-testid="confirm-cancel"' in page
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_resume_of_a_stopped_job_queues_it_again(client, team, project, detect_version, gpu_local):
    job = job_row(
        project=project,
        version=detect_version,
        gpu=gpu_local,
        state=JobState.STOPPED,
        epochs_done=1,
        checkpoint_epoch=1,
        error="",
    )
    client.force_login(team.editor)
    assert "Resume</button>" in _text(client.get(_url("job_detail", pk=job.pk)))
    response = client.post(_url("job_resume", pk=job.pk), follow=True)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.finished_at is None
    assert "queued again" in _text(response)
    # A queued job cannot be resumed: the reason shows on the page.
    page = _text(client.post(_url("job_resume", pk=job.pk), follow=True))
    assert "Only a stopped or failed job can be resumed" in page


# --- downloads ------------------------------------------------------------------------------------


def test_files_download_only_by_their_name_in_the_job(
    client, team, project, detect_version, gpu_local
):
    job = finished_job(project=project, version=detect_version, gpu=gpu_local)
    other = finished_job(project=project, version=detect_version, gpu=gpu_local)
    client.force_login(team.viewer)
    response = client.get(_url("job_artifact", pk=job.pk, name="last.pt"))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment;")
    assert b"".join(response.streaming_content) == WEIGHTS
    plot = client.get(_url("job_artifact", pk=job.pk, name="results.png"))
    assert plot["Content-Type"] == "image/png" and b"".join(plot.streaming_content) == PNG
    assert plot["Content-Disposition"].startswith("inline;")
    # Keys that exist in storage but are not this job's files, or not files at all.
    for name in (
        "secret.pt",
        job.artifacts["last.pt"],  # a key, not a name
        other.model.weights_key,
        f"..%2F..%2F{job.pk}%2Flast.pt",
    ):
        url = _url("job_artifact", pk=job.pk, name="x").removesuffix("x") + name
        assert client.get(url).status_code == 404, name


def test_model_page_and_weights_download(client, team, project, detect_version, gpu_local):
    job = finished_job(project=project, version=detect_version, gpu=gpu_local)
    model = job.model
    client.force_login(team.viewer)
    page = _text(client.get(_url("model_detail", pk=model.pk)))
    for text in ("Detect", "yolo11n", "bird", "64", "Finished run", "coco8 v1", "0.6000"):
        assert text in page, text
    response = client.get(_url("model_weights", pk=model.pk))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"] == (
        f'attachment; filename="kestrel-model-{model.pk}-yolo11n.pt"'
    )
    assert b"".join(response.streaming_content) == WEIGHTS


# --- lists ----------------------------------------------------------------------------------------


def test_project_page_lists_its_jobs_and_models(client, team, project, detect_version, gpu_local):
    done = finished_job(project=project, version=detect_version, gpu=gpu_local)
    queued = job_row(project=project, version=detect_version, gpu=gpu_local, name="next run")
    client.force_login(team.editor)
    page = _text(client.get(_url("project_detail", pk=project.pk)))
    assert _url("job_create", pk=project.pk) in page and "Train a model" in page
    jobs = re.search(r'data-testid="project-jobs".*?</section>', page, re.S).group(0)
    assert "Finished run" in jobs and "next run" in jobs
    assert "Succeeded" in jobs and "Queued" in jobs and "3 / 3" in jobs
    assert "0.500" in jobs  # the best mAP50-95 over its epochs (the main metric of detect)
    models = re.search(r'data-testid="project-models".*?</section>', page, re.S).group(0)
    assert done.model.name in models
    assert queued.title in jobs


def test_jobs_list_filters_by_state_with_constant_queries(
    client, team, project, detect_version, gpu_local, django_assert_num_queries
):
    finished_job(project=project, version=detect_version, gpu=gpu_local)
    job_row(project=project, version=detect_version, gpu=gpu_local, name="waiting")
    client.force_login(team.viewer)
    page = _text(client.get(_url("job_list")))
    assert "Finished run" in page and "waiting" in page
    page = _text(client.get(_url("job_list") + "?state=queued"))
    assert "waiting" in page and "Finished run" not in page
    page = _text(client.get(_url("job_list") + "?state=bogus"))
    assert "waiting" in page and "Finished run" in page

    with django_assert_num_queries(5) as few:  # the session comes from the cache
        client.get(_url("job_list"))
    for _ in range(10):
        finished_job(project=project, version=detect_version, gpu=gpu_local)
    with django_assert_num_queries(len(few.captured_queries)):
        response = client.get(_url("job_list"))
    assert len(re.findall('data-testid="job-row"', response.content.decode())) == 12


def test_the_nav_links_to_training(client, team):
    client.force_login(team.viewer)
    page = client.get(reverse("workspace_detail", kwargs={"ws_slug": "acme"})).content.decode()
    assert f'<a href="{_url("job_list")}">Training</a>' in page


def test_metrics_shown_are_the_task_s_own():
    segment = metric_groups(
        {
            "metrics/mAP50(B)": 0.5,
            "metrics/mAP50(M)": 0.4,
            "train/seg_loss": 1.0,
            "val/seg_loss": 1.1,
            "lr/pg1": 0.01,
        }
    )
    assert [(m["label"], m["what"]) for m in segment["quality"]] == [
        ("mAP50", "box"),
        ("mAP50", "mask"),
    ]
    assert segment["losses"] == [{"name": "seg_loss", "train": 1.0, "val": 1.1}]
    assert segment["rates"] == [{"label": "group 1", "value": 0.01}]
    classify = metric_groups({"metrics/accuracy_top1": 0.9, "metrics/accuracy_top5": 1.0})
    assert [m["label"] for m in classify["quality"]] == ["Top-1 accuracy", "Top-5 accuracy"]


def test_asking_for_an_email_sends_one_when_the_job_ends(
    client,
    team,
    project,
    detect_version,
    gpu_local,
    mailoutbox,
    django_capture_on_commit_callbacks,
):
    from training.services.jobs import job_transition

    client.force_login(team.editor)
    data = _form(detect_version, gpu_local, name="nightly", notify_email="1")
    client.post(_url("job_create", pk=project.pk), data)
    job = TrainingJob.objects.get()
    assert job.notify_email
    from django.db import transaction

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        locked = TrainingJob.objects.select_for_update().get(pk=job.pk)
        job_transition(locked, JobState.FAILED, error="The GPU ran out of memory.")
    [mail] = mailoutbox
    assert mail.to == [team.editor.email] and "nightly failed" in mail.subject
    assert "The GPU ran out of memory." in mail.body
    assert f"/w/acme/training/jobs/{job.pk}/" in mail.body


def test_a_budget_cap_is_kept_in_micro_credits_and_a_bad_one_refused(
    client, team, project, detect_version, gpu_local
):
    client.force_login(team.editor)
    response = client.post(
        _url("job_create", pk=project.pk), _form(detect_version, gpu_local, budget_cap="-1")
    )
    assert response.status_code == 400 and not TrainingJob.objects.exists()
    client.post(
        _url("job_create", pk=project.pk), _form(detect_version, gpu_local, budget_cap="2.50")
    )
    assert TrainingJob.objects.get().budget_cap == 2_500_000
