"""Long-running rows that nobody reaped (issue 14, item 8).

A worker that dies mid-job (killed for real: a Celery worker process, SIGKILL) used to leave its
row RUNNING for ever, blocking the dataset or model behind it; two "start" requests at the same
moment could both start a run. Every long job's row now holds a lease its worker renews, beat's
reapers give a row whose lease ran out to another worker (or fail it, with a reason the page
shows, after a bounded number of attempts), a late worker can no longer write over the newer
attempt, and "one at a time" is a constraint of the database.

Leases here are short: LEASE seconds in this process (through `settings`), WORKER_LEASE in the
worker processes (through their environment: long enough to be renewed on a busy machine). To
stop a worker at a known point mid-job, the stored file it reads (an archive, an image, the
weights) is a named pipe nobody writes to, storage that hangs; it is put back afterwards.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from django.conf import settings as django_settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import IntegrityError, connection, transaction
from django.test import Client

from annotation.models import PrelabelRun, PrelabelState
from annotation.services import prelabel_start
from config.celery import app as celery_app
from core.errors import ServiceError
from datasets.models import Image, Import, ImportStatus, UploadChunk
from deploy.exports import export_start
from deploy.models import ExportState, ModelExport
from tests.annotation.weights import confident_weights_save
from tests.datasets.archives import SHARED, zip_folder
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, blob_for
from tests.servers import subprocess_database_url
from tests.training.factories import trained_model_row
from tests.workspaces.factories import ProjectFactory
from training.models import TrainedModel

ROOT = Path(__file__).resolve().parents[2]
COCO = SHARED / "coco8"
LEASE = 1.0
WORKER_LEASE = 4.0


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def short_leases(settings):
    settings.LONG_JOB_LEASE_SECONDS = LEASE
    return LEASE


class Worker:
    """A real Celery worker on this suite's default queue, in a session of its own."""

    def __init__(self, log: Path):
        env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "LONG_JOB_LEASE_SECONDS": str(WORKER_LEASE),
        }
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker",
             "-Q", django_settings.CELERY_TASK_DEFAULT_QUEUE, "--pool", "solo",
             "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip",
             "--without-mingle"],
            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a lost machine does: no cleanup runs. The processes
        it started (an export's worker process) go too, by their ids."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        os.killpg(self.proc.pid, signal.SIGKILL)
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def workers(transactional_db, tmp_path):
    started: list[Worker] = []

    def start() -> Worker:
        worker = Worker(tmp_path / f"worker-{len(started)}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def _wait(what, timeout: float = 120.0, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while not (value := what()):
        assert time.monotonic() < deadline, f"gave up waiting after {timeout}s"
        time.sleep(every)
    return value


def reap() -> None:
    """What beat does: every reaper it schedules, run once."""
    celery_app.loader.import_default_modules()  # the tasks modules, as a worker loads them
    names = [e["task"] for e in django_settings.CELERY_BEAT_SCHEDULE.values()]
    reapers = [n for n in names if n.endswith(("_reap", "_requeue_stale"))]
    assert reapers
    for name in reapers:
        celery_app.tasks[name].apply().get()


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _fifo_at(key: str) -> bytes:
    """Replace the stored file at `key` by a named pipe: reading it blocks (storage that hangs).
    Returns the file's bytes, for `_restore`."""
    path = Path(default_storage.path(key))
    data = path.read_bytes() if path.exists() else b""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return data


def _restore(key: str, data: bytes) -> None:
    path = Path(default_storage.path(key))
    path.unlink()
    path.write_bytes(data)


def _together(calls) -> list:
    """Run each call in a thread of its own (its own database connection), released at once."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        try:
            barrier.wait()
            results[i] = call()
        except Exception as e:  # the answer a caller would get
            results[i] = e
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@pytest.fixture(scope="session")
def confident_weights(tmp_path_factory) -> Path:
    return confident_weights_save(tmp_path_factory.mktemp("lease-weights") / "confident.pt")


@pytest.fixture
def birds(team, confident_weights):
    dataset = DatasetFactory(workspace=team.workspace, task="detect", name="Birds")
    DatasetClassFactory(dataset=dataset, index=0, name="bird")
    for path in sorted((COCO / "images" / "train").glob("*.jpg"))[:2]:
        ImageFactory(dataset=dataset, blob=blob_for(path.read_bytes(), "image/jpeg"))
    model = trained_model_row(
        workspace=team.workspace,
        class_names=["bird", "nest"],
        weights=confident_weights.read_bytes(),
    )
    return dataset, model


# --- pre-labelling --------------------------------------------------------------------------------


def test_a_prelabel_run_whose_worker_died_is_reaped_and_resumed(team, birds, workers, short_leases):
    dataset, model = birds
    access = team.access("editor")
    run = prelabel_start(access=access, dataset=dataset, model_id=model.pk)
    weights = _fifo_at(model.weights_key)
    first = workers()
    _wait(lambda: PrelabelRun.objects.get(pk=run.pk).state == PrelabelState.RUNNING)
    time.sleep(WORKER_LEASE * 1.5)  # renewed while it waits on storage: nobody takes it over
    reap()
    first.kill()
    run.refresh_from_db()
    assert run.state == PrelabelState.RUNNING, run.error

    with pytest.raises(ServiceError, match="already going"):
        prelabel_start(access=access, dataset=dataset, model_id=model.pk)
    time.sleep(WORKER_LEASE + 0.5)
    reap()
    run.refresh_from_db()
    assert run.state == PrelabelState.QUEUED and run.attempts == 1
    _restore(model.weights_key, weights)
    workers()
    run = _wait(
        lambda: PrelabelRun.objects.filter(pk=run.pk, state__in=["succeeded", "failed"]), 180
    )
    run = run.get()
    assert run.state == PrelabelState.SUCCEEDED, run.error
    assert run.done == run.total == 2 and run.attempts == 2
    again = prelabel_start(access=access, dataset=dataset, model_id=model.pk)
    assert again.state == PrelabelState.QUEUED


def test_two_prelabel_starts_at_once_start_one_run(team, birds, transactional_db):
    _, model = birds
    access = team.access("editor")
    for n in range(5):
        dataset = DatasetFactory(workspace=team.workspace, task="detect", name=f"Race {n}")
        DatasetClassFactory(dataset=dataset, index=0, name="bird")
        answers = _together(
            [lambda d=dataset: prelabel_start(access=access, dataset=d, model_id=model.pk)] * 2
        )
        runs = [a for a in answers if isinstance(a, PrelabelRun)]
        refused = [a for a in answers if isinstance(a, ServiceError)]
        assert len(runs) == 1 and len(refused) == 1, answers
        assert "already going" in str(refused[0])
        assert PrelabelRun.objects.filter(dataset=dataset).count() == 1


def test_the_database_refuses_a_second_active_prelabel_run(team, birds):
    dataset, model = birds
    PrelabelRun.objects.create(workspace=team.workspace, dataset=dataset, model=model)
    with pytest.raises(IntegrityError), transaction.atomic():
        PrelabelRun.objects.create(
            workspace=team.workspace, dataset=dataset, model=model, state=PrelabelState.RUNNING
        )
    PrelabelRun.objects.create(
        workspace=team.workspace, dataset=dataset, model=model, state=PrelabelState.FAILED
    )


def test_a_reaped_prelabel_worker_cannot_write_over_the_next_attempt(team, birds, short_leases):
    from annotation.prelabel import PRELABEL_JOB, prelabel_execute
    from core.leases import LeaseLost, lease_take

    dataset, model = birds
    run = prelabel_start(access=team.access("editor"), dataset=dataset, model_id=model.pk)
    late = lease_take(PRELABEL_JOB, run.pk)
    time.sleep(LEASE + 0.2)
    reap()
    current = lease_take(PRELABEL_JOB, run.pk)
    assert current is not None and current.attempt == 2
    assert current.finish(PrelabelState.SUCCEEDED, done=2, total=2)
    run.refresh_from_db()
    prelabel_execute(run, late)  # the late worker wakes up: it writes nothing
    with pytest.raises(LeaseLost):
        late.renew(done=0)
    assert not late.finish(PrelabelState.FAILED, error="late")
    run.refresh_from_db()
    assert (run.state, run.done, run.error) == (PrelabelState.SUCCEEDED, 2, "")
    assert not run.suggestions and not Image.objects.filter(uncertainty__isnull=False).exists()


def test_a_prelabel_run_lost_too_often_fails_with_a_reason_the_page_shows(
    team, birds, short_leases, settings
):
    from annotation.prelabel import PRELABEL_JOB
    from core.leases import lease_take

    dataset, model = birds
    run = prelabel_start(access=team.access("editor"), dataset=dataset, model_id=model.pk)
    for _ in range(settings.LONG_JOB_MAX_ATTEMPTS):
        assert lease_take(PRELABEL_JOB, run.pk) is not None
        time.sleep(LEASE + 0.2)
        reap()
    run.refresh_from_db()
    assert run.state == PrelabelState.FAILED and run.lease_owner == ""
    assert "interrupted 3 times" in run.error
    page = _client(team.viewer).get(f"/w/acme/datasets/{dataset.pk}/labelling/").content.decode()
    assert "interrupted 3 times" in page
    prelabel_start(access=team.access("editor"), dataset=dataset, model_id=model.pk)


# --- imports ------------------------------------------------------------------------------------


def _queued_import(dataset, tmp_path) -> tuple[Import, bytes]:
    data = zip_folder(COCO, tmp_path / "coco8.zip").read_bytes()
    imp = Import.objects.create(
        dataset=dataset,
        filename="coco8.zip",
        files=[{"name": "coco8.zip", "size": len(data)}],
        total_size=len(data),
        status=ImportStatus.QUEUED,
    )
    chunk = UploadChunk.objects.create(upload=imp, file_index=0, chunk_index=0, size=len(data))
    default_storage.save(chunk.storage_key, ContentFile(data))
    return imp, chunk.storage_key


def test_an_import_whose_worker_died_is_reaped_and_resumed(team, workers, short_leases, tmp_path):
    from datasets.tasks import import_run_task

    dataset = DatasetFactory(workspace=team.workspace, name="Imported")
    imp, key = _queued_import(dataset, tmp_path)
    data = _fifo_at(key)
    first = workers()
    import_run_task.delay(imp.pk)
    _wait(lambda: Import.objects.get(pk=imp.pk).status == ImportStatus.RUNNING)
    time.sleep(WORKER_LEASE * 1.5)  # renewed while it waits on storage: nobody takes it over
    reap()
    assert Import.objects.get(pk=imp.pk).status == ImportStatus.RUNNING
    first.kill()
    time.sleep(WORKER_LEASE + 0.5)
    reap()
    imp.refresh_from_db()
    assert imp.status == ImportStatus.QUEUED and imp.attempts == 1
    _restore(key, data)
    workers()
    _wait(lambda: Import.objects.get(pk=imp.pk).is_final)
    imp.refresh_from_db()
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["images_imported"] == 8 and imp.attempts == 2
    assert Image.objects.filter(dataset=dataset).count() == 8


def test_a_reaped_import_worker_cannot_commit_its_images(team, short_leases, tmp_path):
    from core.leases import lease_take
    from datasets.services.ingest import IMPORT_JOB, import_execute

    dataset = DatasetFactory(workspace=team.workspace, name="Late import")
    imp, _ = _queued_import(dataset, tmp_path)
    late = lease_take(IMPORT_JOB, imp.pk)
    time.sleep(LEASE + 0.2)
    reap()
    current = lease_take(IMPORT_JOB, imp.pk)
    assert current.finish(ImportStatus.FAILED, error="the newer attempt's answer")
    import_execute(Import.objects.get(pk=imp.pk), late)  # the late worker wakes up
    imp.refresh_from_db()
    assert (imp.status, imp.error) == (ImportStatus.FAILED, "the newer attempt's answer")
    assert not Image.objects.filter(dataset=dataset).exists()


@pytest.mark.django_db(transaction=True)  # its chunks are deleted once the failure commits
def test_an_import_lost_too_often_fails_with_a_reason_the_page_shows(
    team, short_leases, settings, tmp_path
):
    from core.leases import lease_take
    from datasets.services.ingest import IMPORT_JOB

    dataset = DatasetFactory(workspace=team.workspace, name="Given up")
    imp, key = _queued_import(dataset, tmp_path)
    for _ in range(settings.LONG_JOB_MAX_ATTEMPTS):
        assert lease_take(IMPORT_JOB, imp.pk) is not None
        time.sleep(LEASE + 0.2)
        reap()
    imp.refresh_from_db()
    assert imp.status == ImportStatus.FAILED and "interrupted 3 times" in imp.error
    assert not UploadChunk.objects.filter(upload=imp).exists()
    page = _client(team.viewer).get(f"/w/acme/imports/{imp.pk}/")
    assert "interrupted 3 times" in page.content.decode()


# --- health checks ------------------------------------------------------------------------------


def _health_dataset(team):
    dataset = DatasetFactory(workspace=team.workspace, name="Checked")
    cls = DatasetClassFactory(dataset=dataset, index=0, name="thing")
    images = [ImageFactory(dataset=dataset, split=s) for s in ("train", "train", "val")]
    from tests.datasets.factories import LabelFactory

    for image in images:
        LabelFactory(image=image, dataset_class=cls)
    return dataset, images


def test_a_health_check_whose_worker_died_is_reaped_and_resumed(team, workers, short_leases):
    from datasets.models import HealthRun, HealthRunState
    from datasets.services.health_runs import health_run_request

    dataset, images = _health_dataset(team)
    key = images[0].blob.storage_key
    data = _fifo_at(key)
    access = team.access("editor")
    first = workers()
    assert health_run_request(access=access, dataset=dataset)
    _wait(lambda: HealthRun.objects.filter(dataset=dataset, state=HealthRunState.RUNNING))
    first.kill()
    assert not health_run_request(access=access, dataset=dataset)  # still blocked
    time.sleep(WORKER_LEASE + 0.5)
    reap()
    run = HealthRun.objects.get(dataset=dataset)
    assert run.state == HealthRunState.QUEUED and run.attempts == 1
    _restore(key, data)
    workers()
    _wait(lambda: HealthRun.objects.filter(pk=run.pk, state=HealthRunState.SUCCEEDED))
    dataset.refresh_from_db()
    assert dataset.health_checked_at is not None
    page = _client(team.viewer).get(f"/w/acme/datasets/{dataset.pk}/health/").content.decode()
    assert 'data-testid="health-status"' not in page
    assert health_run_request(access=access, dataset=dataset)


def test_two_health_check_requests_at_once_queue_one(team, transactional_db):
    from datasets.models import HealthRun

    dataset, _ = _health_dataset(team)
    from datasets.services.health_runs import health_run_request

    access = team.access("editor")
    answers = _together([lambda: health_run_request(access=access, dataset=dataset)] * 2)
    assert sorted(answers) == [False, True]
    assert HealthRun.objects.filter(dataset=dataset).count() == 1
    from datasets.models import HealthRunState

    with pytest.raises(IntegrityError), transaction.atomic():
        HealthRun.objects.create(dataset=dataset, state=HealthRunState.RUNNING)


def test_a_reaped_health_worker_cannot_replace_the_findings(team, short_leases):
    from core.leases import LeaseLost, lease_take
    from datasets.models import HealthFinding, HealthRun, HealthRunState
    from datasets.services.health import health_run
    from datasets.services.health_runs import HEALTH_JOB, health_run_execute, health_run_request

    dataset, images = _health_dataset(team)
    assert health_run_request(access=team.access("editor"), dataset=dataset)
    run = HealthRun.objects.get(dataset=dataset)
    late = lease_take(HEALTH_JOB, run.pk)
    time.sleep(LEASE + 0.2)
    reap()
    health_run_execute(dataset_id=dataset.pk)  # the next attempt, start to end
    run.refresh_from_db()
    assert run.state == HealthRunState.SUCCEEDED and run.attempts == 2
    found = list(HealthFinding.objects.filter(dataset=dataset).values_list("pk", flat=True))
    assert found  # the images are plain colours: near-duplicates across train and val
    Image.objects.filter(pk=images[0].pk).update(split="val")  # the late run would see this
    with pytest.raises(LeaseLost):
        health_run(dataset=dataset, lease=late)
    assert list(HealthFinding.objects.filter(dataset=dataset).values_list("pk", flat=True)) == found


def test_a_health_check_lost_too_often_fails_with_a_reason_the_page_shows(
    team, short_leases, settings
):
    from core.leases import lease_take
    from datasets.models import HealthRun, HealthRunState
    from datasets.services.health_runs import HEALTH_JOB, health_run_request

    dataset, _ = _health_dataset(team)
    assert health_run_request(access=team.access("editor"), dataset=dataset)
    run = HealthRun.objects.get(dataset=dataset)
    for _ in range(settings.LONG_JOB_MAX_ATTEMPTS):
        assert lease_take(HEALTH_JOB, run.pk) is not None
        time.sleep(LEASE + 0.2)
        reap()
    run.refresh_from_db()
    assert run.state == HealthRunState.FAILED and "interrupted 3 times" in run.error
    page = _client(team.viewer).get(f"/w/acme/datasets/{dataset.pk}/health/").content.decode()
    assert "interrupted 3 times" in page and 'data-testid="health-status"' not in page
    assert health_run_request(access=team.access("editor"), dataset=dataset)


def test_a_queued_health_check_whose_message_was_lost_is_sent_again(team, workers, short_leases):
    from datasets.models import HealthRun, HealthRunState

    dataset, _ = _health_dataset(team)
    run = HealthRun.objects.create(dataset=dataset)  # queued, and no message was ever sent
    workers()
    reap()
    _wait(lambda: HealthRun.objects.filter(pk=run.pk, state=HealthRunState.SUCCEEDED))


# --- exports ------------------------------------------------------------------------------------


def test_an_export_whose_worker_died_is_reaped_and_resumed(
    team, birds, workers, short_leases, settings
):
    _, model = birds
    access = team.access("editor")
    export = export_start(access=access, model=model, fmt="torchscript")
    weights = _fifo_at(model.weights_key)
    first = workers()
    _wait(lambda: ModelExport.objects.get(pk=export.pk).state == ExportState.RUNNING)
    first.kill()  # and the worker process it started, stuck reading the weights
    with pytest.raises(ServiceError, match="already being exported"):
        export_start(access=access, model=model, fmt="torchscript")
    time.sleep(WORKER_LEASE + 0.5)
    reap()
    export.refresh_from_db()
    assert export.state == ExportState.QUEUED and export.attempts == 1
    _restore(model.weights_key, weights)
    workers()
    _wait(lambda: ModelExport.objects.get(pk=export.pk).is_final, timeout=180, every=0.5)
    export.refresh_from_db()
    assert export.state == ExportState.SUCCEEDED, export.error
    assert default_storage.exists(export.file_key)
    export_start(access=access, model=model, fmt="torchscript")


def test_two_exports_at_once_start_one_and_the_database_refuses_a_second(team, transactional_db):
    model = trained_model_row(workspace=team.workspace, class_names=["a"])
    access = team.access("editor")
    answers = _together([lambda: export_start(access=access, model=model, fmt="onnx")] * 2)
    assert sum(isinstance(a, ModelExport) for a in answers) == 1, answers
    assert sum(isinstance(a, ServiceError) for a in answers) == 1, answers
    with pytest.raises(IntegrityError), transaction.atomic():
        ModelExport.objects.create(
            workspace=team.workspace, model=model, format="onnx", state=ExportState.RUNNING
        )


def test_a_reaped_export_worker_cannot_write_over_the_next_attempt(team, short_leases):
    from core.leases import lease_take
    from deploy.exports import EXPORT_JOB, export_finish

    model = trained_model_row(workspace=team.workspace, class_names=["a"])
    export = export_start(access=team.access("editor"), model=model, fmt="onnx")
    late = lease_take(EXPORT_JOB, export.pk)
    time.sleep(LEASE + 0.2)
    reap()
    current = lease_take(EXPORT_JOB, export.pk)
    assert export_finish(current, state=ExportState.SUCCEEDED, file_key="new", progress=100)
    assert not export_finish(late, state=ExportState.FAILED, error="late", file_key="")
    export.refresh_from_db()
    assert (export.state, export.file_key, export.error) == (ExportState.SUCCEEDED, "new", "")


# --- inspection of uploaded weights -------------------------------------------------------------


def _upload(team, weights: Path) -> TrainedModel:
    from django.core.files.uploadedfile import SimpleUploadedFile

    project = ProjectFactory(workspace=team.workspace)
    _client(team.editor).post(
        f"/w/acme/projects/{project.pk}/models/upload/",
        {
            "weights": SimpleUploadedFile("mine.pt", weights.read_bytes()),
            "name": "Mine",
            "task": "detect",
        },
    )
    return TrainedModel.objects.get(name="Mine")


def test_an_inspection_whose_worker_died_is_reaped_and_resumed(
    team, confident_weights, workers, short_leases
):
    model = _upload(team, confident_weights)
    weights = _fifo_at(model.weights_key)
    first = workers()
    _wait(lambda: getattr(TrainedModel.objects.get(pk=model.pk), "inspect_lease_owner", None))
    first.kill()
    time.sleep(WORKER_LEASE + 0.5)
    reap()
    model.refresh_from_db()
    assert model.inspect_state == "pending" and model.inspect_lease_owner == ""
    assert model.inspect_attempts == 1
    _restore(model.weights_key, weights)
    workers()
    _wait(lambda: TrainedModel.objects.get(pk=model.pk).inspect_state != "pending", timeout=120)
    model.refresh_from_db()
    assert model.inspect_state == "ok", model.inspect_error
    export_start(access=team.access("editor"), model=model, fmt="onnx")  # usable now


def test_a_reaped_inspector_cannot_write_over_the_next_attempt(team, short_leases):
    from core.leases import lease_take
    from training.services.inspection import INSPECT_JOB, model_inspect_record
    from training.weights_process import WorkerAnswer

    model = trained_model_row(workspace=team.workspace, class_names=["a"])
    TrainedModel.objects.filter(pk=model.pk).update(inspect_state="pending")
    late = lease_take(INSPECT_JOB, model.pk)
    time.sleep(LEASE + 0.2)
    reap()
    current = lease_take(INSPECT_JOB, model.pk)
    good = WorkerAnswer(result={"task": "detect", "class_names": ["bird"], "imgsz": 64})
    assert model_inspect_record(lease=current, answer=good) is not None
    assert model_inspect_record(lease=late, answer=WorkerAnswer(error="late")) is None
    model.refresh_from_db()
    assert (model.inspect_state, model.class_names) == ("ok", ["bird"])


def test_an_inspection_lost_too_often_fails_with_a_reason_the_page_shows(
    team, short_leases, settings
):
    from core.leases import lease_take
    from training.services.inspection import INSPECT_JOB

    model = trained_model_row(workspace=team.workspace, class_names=["a"])
    TrainedModel.objects.filter(pk=model.pk).update(inspect_state="pending")
    for _ in range(settings.LONG_JOB_MAX_ATTEMPTS):
        assert lease_take(INSPECT_JOB, model.pk) is not None
        time.sleep(LEASE + 0.2)
        reap()
    model.refresh_from_db()
    assert model.inspect_state == "failed" and "interrupted 3 times" in model.inspect_error
    page = _client(team.viewer).get(f"/w/acme/models/{model.pk}/").content.decode()
    assert "interrupted 3 times" in page


def test_every_kind_of_long_job_is_reaped_by_the_one_beat_reaper():
    from django.utils.module_loading import import_string

    from core.leases import LongJob, long_job_kinds
    from datasets.models import HealthRun

    tasks = {e["task"] for e in django_settings.CELERY_BEAT_SCHEDULE.values()}
    assert "core.long_jobs_reap" in tasks
    kinds = [import_string(path) for path in long_job_kinds()]
    assert all(isinstance(kind, LongJob) or callable(kind) for kind in kinds)
    models = {kind.model for kind in kinds if isinstance(kind, LongJob)}
    assert {PrelabelRun, Import, HealthRun, ModelExport, TrainedModel} <= models
    assert "training.reaper.jobs_reap" in long_job_kinds()  # training jobs: their own rule


def test_a_kind_whose_reaping_fails_does_not_stop_the_others(team, birds, short_leases):
    """One kind's reaper raising (a bug, a table being migrated) still reaps the rest."""
    from annotation.prelabel import PRELABEL_JOB
    from core import leases

    dataset, model = birds
    run = prelabel_start(access=team.access("editor"), dataset=dataset, model_id=model.pk)
    assert leases.lease_take(PRELABEL_JOB, run.pk) is not None
    time.sleep(LEASE + 0.2)
    leases._KINDS.insert(0, "tests.security.no_such_module.KIND")
    try:
        touched = leases.long_jobs_reap()
    finally:
        leases._KINDS.remove("tests.security.no_such_module.KIND")
    assert touched["annotation.prelabel.PRELABEL_JOB"] == 1
    run.refresh_from_db()
    assert run.state == PrelabelState.QUEUED and run.attempts == 1
