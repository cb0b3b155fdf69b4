"""The Ultralytics Platform's training webhooks (training.platform_webhooks) through Django's
client, with the bodies stock `ultralytics` sends (ultralytics/utils/callbacks/platform.py):
each event, out of order and twice, the refusals (401 only for a key that is not a key),
the signed single-use upload, Stop answered as `cancelled`, resume, lost runs, and the pages
that show an external job. The real client against a live server is test_platform_client.py."""

import io
import json
import zipfile
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.leases import long_jobs_reap
from training.models import (
    EpochMetric,
    ExternalUpload,
    FailureKind,
    InspectState,
    JobKind,
    JobState,
    LogChunk,
    SystemSample,
    TrainedModel,
    TrainingJob,
)
from training.services.external_runs.client_input import slug
from training.services.jobs import job_stop
from workspaces.models import Project
from workspaces.services.keys import api_key_create

METRICS = "/api/webhooks/training/metrics"
UPLOAD = "/api/webhooks/models/upload"

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(team) -> Project:
    return Project.objects.create(
        workspace=team.workspace, name="Bird Watch", created_by=team.owner
    )


@pytest.fixture
def key(team) -> str:
    return api_key_create(access=team.access("admin"), name="laptop", scopes=["train"])[1]


def started_data(epochs: int = 3, save_dir: str = "/home/me/runs/acme/bird-watch/run1") -> dict:
    return {
        "trainArgs": {
            "task": "detect",
            "model": "yolo11n.yaml",
            "data": "coco8.yaml",
            "epochs": str(epochs),
            "imgsz": "64",
            "batch": "16",
            "patience": "100",
            "optimizer": "auto",
            "seed": "0",
            "save_dir": save_dir,
        },
        "epochs": epochs,
        "device": "cpu",
        "environment": {
            "hostname": "lab-box",
            "cpu": "Intel Xeon",
            "os": "Linux",
            "command": "yolo train",
        },
        "system": {
            "cpu": 12.5,
            "ram": 40.0,
            "disk": [{"mount": "/", "used_gb": 50.0, "total_gb": 100.0}],
            "gpus": {},
        },
    }


def epoch_data(epoch: int, **extra) -> dict:
    return {
        "epoch": epoch,
        "metrics": {
            "train/box_loss": 1.5 - epoch / 10,
            "val/box_loss": 1.6 - epoch / 10,
            "metrics/mAP50(B)": 0.1 * (epoch + 1),
            "metrics/mAP50-95(B)": 0.05 * (epoch + 1),
            "lr": 0.01,
        },
        "system": {"cpu": 80.0, "ram": 50.0, "gpus": {"0": {"usage": 97.0, "temp": 70}}},
        "fitness": 0.1,
        "best_fitness": 0.1,
        **extra,
    }


def send(client, key, event, data, **identity):
    body = json.dumps({**identity, "event": event, "data": data})
    return client.post(
        METRICS, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}"
    )


def start(client, key, name="run1", project="acme/bird-watch", **kw):
    response = send(client, key, "training_started", started_data(**kw), project=project, name=name)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()


def checkpoint_bytes() -> bytes:
    """A zip (what torch.save writes); enough for the PUT's check, not a model."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        # A fixed time: the same bytes on every call (a zip entry holds its time otherwise).
        zf.writestr(zipfile.ZipInfo("archive/data.pkl", (2026, 1, 1, 0, 0, 0)), b"not really")
    return buffer.getvalue()


def upload(client, key, model_id, run_id, content: bytes, filename="best.pt"):
    body = {"modelId": model_id, "runId": run_id, "filename": filename}
    response = client.post(
        UPLOAD,
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 200, response.content
    answer = response.json()
    put = client.put(answer["uploadUrl"], content, content_type="application/octet-stream")
    return answer, put


def complete(client, key, model_id, run_id, model_path=None):
    results = {"metrics": {"metrics/mAP50(B)": 0.42, "fitness": 0.3}, "bestEpoch": 1}
    if model_path:
        results |= {"modelPath": model_path, "modelSize": 10}
    data = {
        "results": results,
        "classNames": ["bird", "cat"],
        "plots": [
            {"type": "confusion_matrix", "matrix": [[3, 0, 1], [0, 2, 0], [1, 0, 0]]},
            {
                "type": "pr_curve",
                "x": [0, 0.5, 1],
                "y": [[1, 0.5, 0], [1, 0.7, 0]],
                "ap": [0.5, 0.6],
            },
        ],
        "runId": run_id,
    }
    return send(client, key, "training_complete", data, modelId=model_id)


def test_the_slug_is_the_clients():
    from ultralytics.utils.callbacks.platform import slugify

    for text in ["Bird Watch", "My  Project_1!", "--a--b--", "Ünïcode names", "x" * 200, "run 1"]:
        assert slug(text) == slugify(text)


def test_a_run_from_start_to_model(client, key, team, project):
    answer = start(client, key)
    job = TrainingJob.objects.get(pk=int(answer["modelId"]))
    assert job.kind == JobKind.EXTERNAL and job.state == JobState.RUNNING
    assert job.project == project and job.name == "run1" and job.task == "detect"
    assert (job.model_family, job.model_size, job.epochs, job.imgsz) == ("yolo11", "n", 3, 64)
    assert job.dataset_version is None and job.gpu_type is None
    assert "lab-box" in job.device and "Intel Xeon" in job.device
    assert answer["runId"] == job.attempt_rows.get().pk
    assert answer["modelSlug"] == "run1" and answer["cancelled"] is False
    assert answer["modelUrl"].endswith(
        reverse("job_detail", kwargs={"ws_slug": "acme", "pk": job.pk})
    )
    model_id, run_id = answer["modelId"], answer["runId"]
    for epoch in range(3):
        response = send(client, key, "epoch_end", epoch_data(epoch), modelId=model_id)
        assert response.json() == {"ok": True, "cancelled": False}
    # The final validation of best.pt, one past the last epoch.
    final = {"epoch": 3, "metrics": {"metrics/mAP50(B)": 0.42, "train/box_loss": 1.1}}
    assert send(client, key, "epoch_end", final, modelId=model_id).status_code == 200
    chunk = {"chunkId": 1764670000001, "content": "[2026-12-02 10:00:00] line one\nline two"}
    assert send(client, key, "console_output", chunk, modelId=model_id).status_code == 200
    answer_up, put = upload(client, key, model_id, run_id, checkpoint_bytes())
    assert put.status_code == 200, put.content
    saved = send(
        client,
        key,
        "checkpoint_saved",
        {"modelPath": answer_up["gcsPath"], "runId": run_id, "uploadPath": answer_up["uploadPath"]},
        modelId=model_id,
    )
    assert saved.status_code == 200 and saved.json()  # the client needs a non-empty object
    done = complete(client, key, model_id, run_id, answer_up["gcsPath"])
    assert done.status_code == 200, done.content
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.epochs_done == 3
    assert list(job.epoch_metrics.values_list("epoch", flat=True)) == [1, 2, 3]
    assert job.final_metrics == {"metrics/mAP50(B)": 0.42, "fitness": 0.3}
    assert job.results["confusion_matrix"]["names"] == ["bird", "cat", "background"]
    assert job.results["best_epoch"] == 2
    assert LogChunk.objects.get(job=job).text.endswith("line two")
    assert SystemSample.objects.filter(job=job).count() == 4  # start + 3 epochs
    assert SystemSample.objects.get(job=job, seq=2).values["gpus"] == [
        {"util_percent": 97.0, "temperature_c": 70.0}
    ]
    model = TrainedModel.objects.get(job=job)
    assert model.inspect_state == InspectState.PENDING  # a worker loads it before it is used
    assert model.class_names == ["bird", "cat"] and model.dataset_version is None
    assert job.attempt_rows.get().end_reason == "finished"
    # Nothing charged: no hold, no capture.
    assert not job.ledger_entries.exists() if hasattr(job, "ledger_entries") else True


def test_events_out_of_order_and_twice_are_kept_once(client, key, project):
    answer = start(client, key)
    model_id = answer["modelId"]
    for epoch in (2, 0, 2, 1, 0):
        assert (
            send(client, key, "epoch_end", epoch_data(epoch), modelId=model_id).status_code == 200
        )
    chunks = [
        (1764670000003, "c"),
        (1764670000001, "a"),
        (1764670000003, "c"),
        (1764670000002, "b"),
    ]
    for chunk_id, text in chunks:
        send(
            client, key, "console_output", {"chunkId": chunk_id, "content": text}, modelId=model_id
        )
    job = TrainingJob.objects.get(pk=model_id)
    assert list(EpochMetric.objects.filter(job=job).values_list("epoch", flat=True)) == [1, 2, 3]
    assert job.epochs_done == 3 and job.latest_metrics["metrics/mAP50(B)"] == pytest.approx(0.3)
    assert [c.text for c in LogChunk.objects.filter(job=job)] == ["a", "b", "c"]
    assert job.resent_events == 3  # epochs 2 and 0 again, chunk 3 again
    # training_complete twice, then a late epoch_end: the run stays as it ended, and says so
    # (410: an ended run takes nothing more).
    assert complete(client, key, model_id, answer["runId"]).status_code == 200
    again = complete(client, key, model_id, answer["runId"])
    assert again.status_code == 410 and "has ended (succeeded)" in again.json()["error"]
    late = send(client, key, "epoch_end", epoch_data(1), modelId=model_id)
    assert late.status_code == 410
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.epochs_done == 3
    assert job.error.startswith("No weights reached Kestrel")


def test_a_second_run_of_the_same_name_gets_the_next_free_one(client, key, project):
    first = start(client, key, save_dir="/a")
    second = start(client, key, save_dir="/b")
    third = start(client, key, save_dir="/c", name="run1")
    assert [first["modelSlug"], second["modelSlug"], third["modelSlug"]] == [
        "run1",
        "run1-2",
        "run1-3",
    ]
    assert second["modelId"] != first["modelId"]


def test_gpu_memory_sent_as_a_percentage_is_kept_in_gigabytes(client, key, project):
    data = started_data()
    data["device"] = "0"
    data["environment"] |= {"gpuType": "NVIDIA H200, 143771MiB", "gpuCount": 1}
    response = send(client, key, "training_started", data, project="acme/bird-watch", name="gpu")
    model_id = response.json()["modelId"]
    sample = epoch_data(0)
    sample["system"]["gpus"] = {"0": {"usage": 97.0, "memory": 25.0, "temp": 70, "power": 285}}
    assert send(client, key, "epoch_end", sample, modelId=model_id).status_code == 200
    job = TrainingJob.objects.get(pk=model_id)
    assert job.device == "lab-box: NVIDIA H200, 143771MiB (0)"
    (gpu,) = SystemSample.objects.get(job=job, seq=2).values["gpus"]
    assert gpu == {
        "util_percent": 97.0,
        "memory_percent": 25.0,
        "memory_total_gb": 140.4,
        "memory_used_gb": 35.1,
        "temperature_c": 70.0,
        "power_w": 285.0,
    }


def test_the_clients_training_bar_is_the_jobs_batch_progress(
    client, key, project, django_capture_on_commit_callbacks
):
    """Frames as ultralytics' TQDM draws the trainer's bar (a coco8 run in the tests closes its
    one-batch bars before the client's 5-second flush, so this is its shape, sent by hand)."""
    from training.streams import progress_key, training_redis

    model_id = start(client, key)["modelId"]
    frames = {
        "7": "                 Class     Images  Instances      Box(P          R      mAP50: 50% "
        "━━━━━━────── 1/2 2.1it/s 0.5s<0.5s",  # a validation bar: not the training's
        "8": "        2/3         0G      1.234      2.345      1.111         12         64: 50% "
        "━━━━━━────── 2/4 2.1it/s 0.9s<0.9s",
    }
    body = {"chunkId": 4, "content": "", "lineCount": 0, "progress": frames}
    with django_capture_on_commit_callbacks(execute=True):
        assert send(client, key, "console_output", body, modelId=model_id).status_code == 200
    progress = json.loads(training_redis().get(progress_key(int(model_id))))
    assert (progress["epoch"], progress["epochs"], progress["batch"], progress["batches"]) == (
        2,
        3,
        2,
        4,
    )
    assert progress["loss"] == [1.234, 2.345, 1.111]
    assert not LogChunk.objects.filter(job_id=model_id).exists()  # frames are not lines


def test_training_started_sent_again_is_the_same_job(client, key, project):
    """The client retries training_started when an answer is lost: one job, not two."""
    first, again = start(client, key), start(client, key)
    assert again["modelId"] == first["modelId"] and again["runId"] == first["runId"]
    assert TrainingJob.objects.filter(project=project).count() == 1


def test_owner_is_matched_case_insensitively_and_project_slugified(client, key, project):
    answer = start(client, key, project="ACME/bird-watch")
    assert TrainingJob.objects.get(pk=answer["modelId"]).project == project


def test_stop_in_kestrel_answers_cancelled_and_the_run_ends_stopped(client, key, team, project):
    answer = start(client, key)
    model_id = answer["modelId"]
    send(client, key, "epoch_end", epoch_data(0), modelId=model_id)
    job = TrainingJob.objects.get(pk=model_id)
    job_stop(access=team.access("editor"), job=job)
    response = send(client, key, "epoch_end", epoch_data(1), modelId=model_id)
    assert response.json()["cancelled"] is True
    _, put = upload(client, key, model_id, answer["runId"], checkpoint_bytes())
    assert put.status_code == 200
    assert complete(client, key, model_id, answer["runId"]).status_code == 200
    job.refresh_from_db()
    assert job.state == JobState.STOPPED and job.epochs_done == 2
    # checkpoint_saved was lost: the stored upload still becomes the model.
    assert TrainedModel.objects.filter(job=job).exists()


def test_the_stop_button_on_the_job_page(client, key, team, project):
    answer = start(client, key)
    client.force_login(team.editor)
    url = reverse("job_stop", kwargs={"ws_slug": "acme", "pk": answer["modelId"]})
    assert client.post(url).status_code == 302
    response = send(client, key, "epoch_end", epoch_data(0), modelId=answer["modelId"])
    assert response.json()["cancelled"] is True
    started_again = send(
        client, key, "console_output", {"chunkId": 5, "content": "x"}, modelId=answer["modelId"]
    )
    assert started_again.json()["cancelled"] is True


def test_resume_continues_the_same_job(client, key, team, project):
    answer = start(client, key)
    model_id = answer["modelId"]
    send(client, key, "epoch_end", epoch_data(0), modelId=model_id)
    job = TrainingJob.objects.get(pk=model_id)
    job_stop(access=team.access("editor"), job=job)
    complete(client, key, model_id, answer["runId"])
    job.refresh_from_db()
    assert job.state == JobState.STOPPED
    # resume=True: the client sends only the saved modelId.
    response = send(client, key, "training_started", started_data(), modelId=model_id)
    resumed = response.json()
    assert resumed["modelId"] == model_id and resumed["runId"] != answer["runId"]
    assert resumed["cancelled"] is False
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 2
    assert job.stop_requested_at is None and job.error == ""
    send(client, key, "epoch_end", epoch_data(1), modelId=model_id)
    send(client, key, "epoch_end", epoch_data(2), modelId=model_id)
    complete(client, key, model_id, resumed["runId"])
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.epochs_done == 3
    assert [a.end_reason for a in job.attempt_rows.all()] == ["stopped", "finished"]


def test_resume_of_a_finished_run_is_refused_so_the_client_starts_a_new_one(client, key, project):
    answer = start(client, key)
    complete(client, key, answer["modelId"], answer["runId"])
    response = send(client, key, "training_started", started_data(), modelId=answer["modelId"])
    assert response.status_code == 200 and response.json()["cancelled"] is True
    assert (
        send(client, key, "training_started", started_data(), modelId="999999").status_code == 404
    )


@pytest.mark.parametrize(
    "header,status",
    [("", 401), ("Bearer ", 401), ("Bearer ul_" + "0" * 40, 401), ("Basic abc", 401)],
)
def test_a_key_that_is_not_a_key_is_401(client, project, header, status):
    body = json.dumps({"project": "acme/bird-watch", "name": "r", "event": "training_started"})
    kwargs = {"HTTP_AUTHORIZATION": header} if header else {}
    response = client.post(METRICS, body, content_type="application/json", **kwargs)
    assert response.status_code == status and "error" in response.json()


def test_scope_and_reach_are_403_and_404_never_401(client, team, stranger, project):
    _, read_only = api_key_create(access=team.access("owner"), name="r", scopes=["read"])
    response = send(
        client, read_only, "training_started", started_data(), project="acme/bird-watch", name="r"
    )
    assert response.status_code == 403 and "scope" in response.json()["error"]
    # A key acts with its creator's role: one whose creator is now a viewer may not train.
    _, viewer_key = api_key_create(access=team.access("owner"), name="v", scopes=["train"])
    team.workspace.memberships.filter(user=team.owner).update(role="viewer")
    response = send(
        client, viewer_key, "training_started", started_data(), project="acme/bird-watch", name="r"
    )
    assert response.status_code == 403
    from workspaces.selectors import workspace_access_for_user

    elsewhere = workspace_access_for_user(user=stranger, slug="elsewhere")
    _, foreign = api_key_create(access=elsewhere, name="f", scopes=["train"])
    Project.objects.create(workspace=elsewhere.workspace, name="Bird Watch")
    for target in ("acme/bird-watch", "acme/nope", "nobody/bird-watch"):
        response = send(
            client, foreign, "training_started", started_data(), project=target, name="r"
        )
        assert response.status_code == 404, target
        assert "No such workspace, project or run" in response.json()["error"]
    assert not TrainingJob.objects.filter(workspace=team.workspace).exists()
    # A job of acme's, named by a key of elsewhere: the same 404, nothing written.
    _, mine = api_key_create(access=team.access("admin"), name="m", scopes=["train"])
    answer = start(client, mine)
    response = send(client, foreign, "epoch_end", epoch_data(0), modelId=answer["modelId"])
    assert response.status_code == 404
    assert not EpochMetric.objects.exists()


def test_malformed_and_oversized_bodies_are_refused_and_counted(client, key, project):
    answer = start(client, key)
    model_id = answer["modelId"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    response = client.post(METRICS, b"{not json", content_type="application/json", **auth)
    assert response.status_code == 400
    bad_epoch = send(client, key, "epoch_end", {"epoch": "two", "metrics": {}}, modelId=model_id)
    assert bad_epoch.status_code == 400 and "epoch" in bad_epoch.json()["error"]
    unknown = send(client, key, "made_up", {}, modelId=model_id)
    assert unknown.status_code == 400
    huge = json.dumps(
        {
            "modelId": model_id,
            "event": "console_output",
            "data": {"chunkId": 9, "content": "x" * (3 << 20)},
        }
    )
    response = client.post(METRICS, huge, content_type="application/json", **auth)
    assert response.status_code == 413
    job = TrainingJob.objects.get(pk=model_id)
    assert job.dropped_events == 3  # the bad epoch, the unknown event and the huge body
    assert not EpochMetric.objects.filter(job=job).exists()
    assert not LogChunk.objects.filter(job=job).exists()


def test_the_signed_upload_is_single_use_and_expires(client, key, project):
    answer = start(client, key)
    body, put = upload(client, key, answer["modelId"], answer["runId"], checkpoint_bytes())
    assert put.status_code == 200
    again = client.put(
        body["uploadUrl"], checkpoint_bytes(), content_type="application/octet-stream"
    )
    assert again.status_code == 403 and "used already" in again.json()["error"]
    # A forged signature, a URL of another token, an expired URL: 403, nothing stored.
    body2, _ = answer_only = (upload_url(client, key, answer["modelId"]), None)
    forged = body2["uploadUrl"].rsplit("sig=", 1)[0] + "sig=" + "0" * 64
    assert (
        client.put(forged, b"PK\x03\x04x", content_type="application/octet-stream").status_code
        == 403
    )
    token = body2["gcsPath"]
    row = ExternalUpload.objects.get(token=token)
    assert row.stored_at is None
    expired = body2["uploadUrl"].replace("exp=", "exp=1").split("&sig")[0] + "&sig=x"
    assert client.put(expired, b"PK", content_type="application/octet-stream").status_code == 403
    assert (
        client.put(f"{UPLOAD}/{token}", b"PK", content_type="application/octet-stream").status_code
        == 403
    )
    del answer_only


def upload_url(client, key, model_id, filename="best.pt"):
    body = {"modelId": model_id, "filename": filename}
    response = client.post(
        UPLOAD,
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_an_expired_upload_url_is_403(client, key, project, monkeypatch):
    answer = start(client, key)
    body = upload_url(client, key, answer["modelId"])
    import time as real_time

    later = real_time.time() + 11 * 60
    monkeypatch.setattr("training.services.external_uploads.time.time", lambda: later)
    response = client.put(
        body["uploadUrl"], checkpoint_bytes(), content_type="application/octet-stream"
    )
    assert response.status_code == 403 and "expired" in response.json()["error"]


def test_an_upload_that_is_not_a_checkpoint_is_refused_and_the_job_says_so(client, key, project):
    answer = start(client, key)
    _, put = upload(client, key, answer["modelId"], answer["runId"], b"#!/bin/sh\necho hi\n")
    assert put.status_code == 400 and "not a PyTorch checkpoint" in put.json()["error"]
    complete(client, key, answer["modelId"], answer["runId"])
    job = TrainingJob.objects.get(pk=answer["modelId"])
    assert job.state == JobState.SUCCEEDED and "not a PyTorch checkpoint" in job.error
    assert not TrainedModel.objects.filter(job=job).exists()


def test_an_upload_over_the_plan_limit_is_413(client, key, team, project):
    plan = team.workspace.plan
    plan.max_model_upload_bytes = 1000
    plan.save()
    answer = start(client, key)
    big = checkpoint_bytes() + b"\0" * 2000
    response = client.post(
        UPLOAD,
        json.dumps({"modelId": answer["modelId"], "filename": "best.pt", "size": len(big)}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 413
    _, put = upload(client, key, answer["modelId"], answer["runId"], big)
    assert put.status_code == 413 and "limit" in put.json()["error"]


def test_upload_names_are_checked(client, key, project):
    answer = start(client, key)
    for name in ("../../etc/passwd", "best.sh", ".pt", "a/b.pt"):
        response = client.post(
            UPLOAD,
            json.dumps({"modelId": answer["modelId"], "filename": name}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        assert response.status_code == 400, name
    assert not ExternalUpload.objects.exists()


def test_a_silent_run_is_marked_lost(client, key, settings, project):
    settings.TRAINING_EXTERNAL_SILENT_SECONDS = 60
    answer = start(client, key)
    fresh = start(client, key, name="other", save_dir="/other")
    TrainingJob.objects.filter(pk=answer["modelId"]).update(
        client_seen_at=timezone.now() - timedelta(minutes=5)
    )
    touched = long_jobs_reap()
    assert touched["training.services.external_runs.external_runs_reap"] == 1
    job = TrainingJob.objects.get(pk=answer["modelId"])
    assert job.state == JobState.FAILED and job.failure_kind == FailureKind.LOST
    assert "no word from lab-box" in job.error and "resume=True" in job.error
    assert job.attempt_rows.get().end_reason == "lost"
    assert TrainingJob.objects.get(pk=fresh["modelId"]).state == JobState.RUNNING
    # Kestrel's own reaper never takes an external job for one of its own.
    from training.reaper import jobs_reap

    jobs_reap()
    assert TrainingJob.objects.get(pk=fresh["modelId"]).state == JobState.RUNNING


def test_concurrent_runs_count_against_the_plan(client, key, team, project):
    plan = team.workspace.plan
    plan.max_concurrent_jobs = 1
    plan.save()
    start(client, key)
    response = send(
        client,
        key,
        "training_started",
        started_data(save_dir="/x"),
        project="acme/bird-watch",
        name="b",
    )
    assert response.status_code == 400 and "at a time" in response.json()["error"]


def test_pages_render_an_external_job(client, key, team, project):
    answer = start(client, key)
    send(client, key, "epoch_end", epoch_data(0), modelId=answer["modelId"])
    body, _ = upload(client, key, answer["modelId"], answer["runId"], checkpoint_bytes())
    complete(client, key, answer["modelId"], answer["runId"], body["gcsPath"])
    job = TrainingJob.objects.get(pk=answer["modelId"])
    model = TrainedModel.objects.get(job=job)
    other = TrainingJob.objects.get(pk=start(client, key, name="second", save_dir="/2")["modelId"])
    client.force_login(team.viewer)
    pages = [
        reverse("job_detail", kwargs={"ws_slug": "acme", "pk": job.pk}),
        reverse("job_list", kwargs={"ws_slug": "acme"}),
        reverse("project_detail", kwargs={"ws_slug": "acme", "pk": project.pk}),
        reverse("model_detail", kwargs={"ws_slug": "acme", "pk": model.pk}),
        reverse("job_log", kwargs={"ws_slug": "acme", "pk": job.pk}),
        reverse("model_list", kwargs={"ws_slug": "acme"}),
        reverse("workspace_detail", kwargs={"ws_slug": "acme"}),
        reverse("project_compare", kwargs={"ws_slug": "acme", "pk": project.pk})
        + f"?jobs={job.pk}&jobs={other.pk}",
        reverse("job_events", kwargs={"ws_slug": "acme", "pk": job.pk}),
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
    api = client.get(f"/api/v1/training/jobs/{job.pk}")
    assert api.status_code == 200, api.content
    assert api.json()["kind"] == "external" and api.json()["gpu_type_id"] is None
    page = client.get(pages[0]).content.decode()
    assert "lab-box" in page and "not charged" in page and "coco8.yaml" in page
