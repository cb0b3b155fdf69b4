"""Long jobs whose database connection ends mid-run (issue 34, part 4).

PostgreSQL ends the worker's connections (pg_terminate_backend, as a restart or a failover does)
during a real import of real images, and during a health check, in a real Celery worker. Each
carries on: the worker connects again and runs the job again under the same lease, from what it
committed, and it ends before its lease would have run out, every image imported once. Before,
the import failed (or stayed "running" until the reaper took it back at lease expiry, minutes
later) and the health check failed for good.

And, on both databases, what core.leases does with a job whose body fails at the database: run
again in place, and when that keeps failing, back in the queue at once (its message sent again),
not left running until its lease runs out.
"""

import base64
import hashlib
import json
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from celery.signals import after_task_publish
from django.conf import settings as django_settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import OperationalError, connection, connections
from django.utils import timezone

from core.leases import LeaseLost, lease_take, lease_work, queued_until
from datasets.models import (
    Blob,
    HealthFinding,
    HealthRun,
    HealthRunState,
    Image,
    Import,
    ImportStatus,
    Label,
    UploadChunk,
)
from datasets.services.datasets import dataset_create
from datasets.services.health import health_run
from datasets.services.health_runs import HEALTH_JOB
from datasets.services.ingest import IMPORT_JOB, dataset_import_path, import_run
from datasets.tasks import import_run_task
from tests.datasets.archives import SHARED, zip_folder
from tests.datasets.factories import DatasetFactory
from tests.training.helpers import wait_for
from tests.workers import Workers

pytestmark = pytest.mark.django_db(transaction=True)

ENDED_BY_POSTGRES = "SQLite has no connections to end: it is a file in the worker's process"
COPIES = 400  # images an import writes: a few seconds of work, in one transaction
WORKER_LEASE = 30.0  # the worker's lease (seconds): renewed every third of it
CARRIED_ON = "connecting again to go on"  # what a worker logs when a job meets a fault


# --- real images, real processes ------------------------------------------------------------------


def coco8_copies(folder: Path, count: int) -> tuple[dict[str, str], int]:
    """`count` images in a YOLO folder, copies of coco8's with their labels, each with bytes of
    its own (a JPEG comment numbers it: the same pixels, another SHA-256). Returns the images'
    SHA-256 by file name, and how many labels they carry."""
    sources = sorted((SHARED / "coco8" / "images").glob("*/*.jpg"))
    folder.mkdir(parents=True)
    shutil.copy(SHARED / "coco8" / "coco8.yaml", folder / "coco8.yaml")
    expected, labels = {}, 0
    for i in range(count):
        source = sources[i % len(sources)]
        split = source.parent.name
        name = f"{source.stem}-{i:04d}"
        data = source.read_bytes()
        note = f"copy {i}".encode()
        data = data[:2] + b"\xff\xfe" + (len(note) + 2).to_bytes(2, "big") + note + data[2:]
        (folder / "images" / split).mkdir(parents=True, exist_ok=True)
        (folder / "labels" / split).mkdir(parents=True, exist_ok=True)
        (folder / "images" / split / f"{name}.jpg").write_bytes(data)
        label_text = (SHARED / "coco8" / "labels" / split / f"{source.stem}.txt").read_text()
        (folder / "labels" / split / f"{name}.txt").write_text(label_text)
        labels += sum(1 for line in label_text.splitlines() if line.strip())
        expected[f"{name}.jpg"] = hashlib.sha256(data).hexdigest()
    return expected, labels


def uploaded(dataset, archive: Path, parts: int = 4) -> Import:
    """A queued import of `archive`, uploaded in `parts` chunks, as the upload page leaves it."""
    data = archive.read_bytes()
    imp = Import.objects.create(
        dataset=dataset,
        filename=archive.name,
        files=[{"name": archive.name, "size": len(data)}],
        total_size=len(data),
        status=ImportStatus.QUEUED,
        lease_until=queued_until(),
    )
    size = -(-len(data) // parts)
    for index in range(parts):
        part = data[index * size : (index + 1) * size]
        chunk = UploadChunk.objects.create(
            upload=imp, file_index=0, chunk_index=index, size=len(part)
        )
        default_storage.delete(chunk.storage_key)  # exactly at its key (see test_ingest)
        default_storage.save(chunk.storage_key, ContentFile(part))
    return imp


def connections_end() -> int:
    """PostgreSQL ends every connection to this test's database but the test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def ended_while_running(model, pk: int, times: int = 3, every: float = 0.7) -> int:
    """End the worker's connections `times` times, `every` seconds apart, while the row runs:
    how many connections were ended."""
    ended = 0
    for i in range(times):
        if model.objects.get(pk=pk).is_final:
            break
        ended += connections_end()
        if i < times - 1:
            time.sleep(every)
    return ended


def final_within_lease(model, pk: int, *, log: Path, timeout: float = 300):
    """The row once final. Fails as soon as it is running past its lease: from then on only
    the reaper would take it back (this test runs none), which is what must not be needed. The
    failure quotes the end of the worker's `log`: what it said about the lease."""

    def final():
        row = model.objects.get(pk=pk)
        if row.is_final:
            return row
        until = row.lease_until
        running = bool(row.lease_owner)
        assert not (running and until and until < timezone.now()), (
            f"its lease ran out at {until:%H:%M:%S} while it was still running: the worker gave "
            "up on it and left it to the reaper. The worker's log ends:\n"
            + "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        )
        return None

    return wait_for(final, timeout=timeout, every=0.1, what=f"{model.__name__} {pk} to end")


class FaultWorker:
    """A real Celery worker on this suite's default queue (imports and health checks go there),
    with a lease of WORKER_LEASE seconds; its console is kept, to read what it did."""

    def __init__(self, log: Path):
        self.log = log
        self.workers = Workers(LONG_JOB_LEASE_SECONDS=str(WORKER_LEASE))

    def start(self) -> None:
        self.workers.start(django_settings.CELERY_TASK_DEFAULT_QUEUE, log=self.log)

    def said(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")


@pytest.fixture
def fault_worker(transactional_db, tmp_path):
    # No message an earlier test left on the queue reaches this test's worker.
    redis.Redis.from_url(django_settings.CELERY_BROKER_URL).delete(
        django_settings.CELERY_TASK_DEFAULT_QUEUE
    )
    worker = FaultWorker(tmp_path / "worker.log")
    yield worker
    worker.workers.stop_all()


# --- in a real worker, PostgreSQL ending its connections ------------------------------------------


@pytest.mark.postgres_only(ENDED_BY_POSTGRES)
def test_an_import_whose_connections_are_ended_carries_on_and_imports_each_image_once(
    team, fault_worker, tmp_path
):
    """Three times during a real import of 400 real images, PostgreSQL ends the worker's
    connections. The import goes on under the same lease (one attempt) and succeeds before its
    lease could have run out: every image once, every label once, its chunks removed."""
    expected, labels = coco8_copies(tmp_path / "copies", COPIES)
    archive = zip_folder(tmp_path / "copies", tmp_path / "copies.zip")
    dataset = dataset_create(access=team.access("editor"), name="Copies", task="detect")
    imp = uploaded(dataset, archive)
    fault_worker.start()
    import_run_task.apply_async(args=[imp.pk], queue=django_settings.CELERY_TASK_DEFAULT_QUEUE)

    wait_for(
        lambda: Import.objects.get(pk=imp.pk).status != ImportStatus.QUEUED,
        timeout=180,
        every=0.02,
        what="the worker to take the import",
    )
    ended = ended_while_running(Import, imp.pk)
    imp = final_within_lease(Import, imp.pk, log=fault_worker.log)

    assert ended >= 1, "no connection of the worker was ended: nothing was tested"
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.attempts == 1  # carried on where it was: not requeued, by the reaper or else
    assert fault_worker.said(CARRIED_ON), "the import never met the fault: nothing was tested"
    assert imp.report["images_imported"] == COPIES
    assert imp.report["labels_imported"] == labels
    images = Image.objects.filter(dataset=dataset)
    assert sorted(images.values_list("filename", flat=True)) == sorted(expected)  # each once
    assert dict(images.values_list("filename", "blob__sha256")) == expected
    assert Label.objects.filter(image__dataset=dataset).count() == labels
    for blob in Blob.objects.filter(images__dataset=dataset):
        assert default_storage.exists(blob.storage_key)
    wait_for(  # removed once the import has committed, in a transaction of their own
        lambda: not UploadChunk.objects.filter(upload=imp).exists(),
        timeout=60,
        what="the upload's chunks to be removed",
    )


def _ended_at_its_first(table: str):
    """An execute wrapper: PostgreSQL ends this connection (pg_terminate_backend, from a
    connection of its own) just before its first plain read of `table` (not a lock, not a
    write), then lets the query go on to meet it."""
    armed = [True]

    def wrapper(execute, sql, params, many, context):
        if armed[0] and sql.startswith("SELECT") and f'FROM "{table}"' in sql:
            if "FOR UPDATE" not in sql:
                armed[0] = False
                pid = context["connection"].connection.info.backend_pid
                other = connections.create_connection("default")
                try:
                    with other.cursor() as cursor:
                        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
                finally:
                    other.close()
        return execute(sql, params, many, context)

    return wrapper, armed


@pytest.mark.postgres_only(ENDED_BY_POSTGRES)
def test_a_connection_ended_just_after_the_lease_is_taken_costs_the_import_nothing(team, tmp_path):
    """PostgreSQL ends the worker's connection right after it took the import's lease, as it
    reads the import's row. Before: the task failed there, and the import stayed "running",
    its worker gone, until its lease ran out and the reaper sent it again (CI, 2026-12-07).
    Now: read again on a new connection, under the same lease, and imported once."""
    expected, _ = coco8_copies(tmp_path / "copies", 8)
    archive = zip_folder(tmp_path / "copies", tmp_path / "copies.zip")
    dataset = dataset_create(access=team.access("editor"), name="Copies", task="detect")
    imp = uploaded(dataset, archive)
    wrapper, armed = _ended_at_its_first(Import._meta.db_table)
    with connection.execute_wrapper(wrapper):
        import_run(import_id=imp.pk)
    assert not armed[0], "the import's row was never read: nothing was tested"
    imp.refresh_from_db()
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.attempts == 1
    images = Image.objects.filter(dataset=dataset)
    assert sorted(images.values_list("filename", flat=True)) == sorted(expected)


@pytest.mark.postgres_only(ENDED_BY_POSTGRES)
def test_a_health_check_whose_connections_are_ended_is_run_again_not_failed(
    team, fault_worker, tmp_path
):
    """The health check an import queues, in a real worker, its connections ended by PostgreSQL
    three times while it reads 400 images. It runs again under the same lease and succeeds;
    its findings are those of a check nobody disturbed, each once."""
    coco8_copies(tmp_path / "copies", COPIES)
    dataset = dataset_create(access=team.access("editor"), name="Checked", task="detect")
    imp = dataset_import_path(
        access=team.access("editor"), dataset=dataset, path=tmp_path / "copies"
    )
    assert imp.status == ImportStatus.SUCCEEDED and imp.report["images_imported"] == COPIES
    run = HealthRun.objects.get(dataset=dataset)  # queued by the import, its message sent
    assert run.state == HealthRunState.QUEUED
    fault_worker.start()

    wait_for(
        lambda: HealthRun.objects.get(pk=run.pk).state != HealthRunState.QUEUED,
        timeout=180,
        every=0.02,
        what="the worker to take the health check",
    )
    ended = ended_while_running(HealthRun, run.pk)
    run = final_within_lease(HealthRun, run.pk, log=fault_worker.log)

    assert ended >= 1, "no connection of the worker was ended: nothing was tested"
    assert run.state == HealthRunState.SUCCEEDED, run.error  # before: failed for good
    assert run.attempts == 1
    assert fault_worker.said(CARRIED_ON), "the check never met the fault: nothing was tested"
    dataset.refresh_from_db()
    assert dataset.health_checked_at is not None

    def findings() -> list[tuple]:
        rows = HealthFinding.objects.filter(dataset=dataset)
        return sorted(rows.values_list("kind", "severity", "message", "image_ids"))

    found = findings()
    assert found
    health_run(dataset=dataset)  # the same check, undisturbed, in this process
    assert found == findings()


def _health_lease():
    """A health run's lease taken, and a reader of how far it runs now."""
    run = HealthRun.objects.create(dataset=DatasetFactory(), lease_until=queued_until())

    def until():
        return HealthRun.objects.get(pk=run.pk).lease_until

    return lease_take(HEALTH_JOB, run.pk), until


@pytest.mark.postgres_only(ENDED_BY_POSTGRES)
def test_the_lease_is_still_renewed_after_its_connection_is_ended(settings):
    """The thread that renews a lease connects again once PostgreSQL ended its connection;
    before, it failed at every beat after, and the lease ran out under a job still working."""
    settings.LONG_JOB_LEASE_SECONDS = 1.5
    lease, until = _health_lease()
    with lease.kept():
        taken = until()
        wait_for(lambda: until() > taken, timeout=20, every=0.05, what="a first renewal")
        assert connections_end() >= 1  # the renewing thread's
        ended_at = timezone.now()
        wait_for(
            lambda: until() > ended_at + timedelta(seconds=settings.LONG_JOB_LEASE_SECONDS),
            timeout=20,
            every=0.05,
            what="a renewal after the connection was ended",
        )


@pytest.mark.postgres_only(ENDED_BY_POSTGRES)
def test_a_renewal_that_failed_is_tried_again_within_a_second_or_two(settings):
    """A renewal that failed (its connection ended) is tried again a second later, not a third
    of the lease later: with a 12 s lease, the next renewal after the ended connection comes
    about 5 s after the one before it (a beat at 4 s fails, its retry 1 s on), where it came 8 s
    after it when the thread waited for its next beat."""
    settings.LONG_JOB_LEASE_SECONDS = 12
    lease, until = _health_lease()
    with lease.kept():
        taken = until()
        first = wait_for(
            lambda: (u := until()) > taken and u, timeout=20, every=0.02, what="a renewal"
        )
        renewed_at = time.monotonic()
        assert connections_end() >= 1  # the renewing thread's, idle until its next beat
        wait_for(lambda: until() > first, timeout=20, every=0.02, what="a renewal after the fault")
        gap = time.monotonic() - renewed_at
    assert gap < 6.5, f"the renewal after the failed one came {gap:.1f} s after the one before"


# --- core.leases, on both databases ---------------------------------------------------------------


FAULT_SQL = {
    # Ends this very connection, as a restart or a failover does.
    "postgresql": "SELECT pg_terminate_backend(pg_backend_pid())",
    # SQLite has no connection to end: a statement it refuses raises its OperationalError.
    "sqlite": "SELECT * FROM kestrel_no_such_table",
}


def fail_at_the_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute(FAULT_SQL[connection.vendor])


@pytest.fixture
def published():
    """Tasks really published to the broker during the test: [(task name, args)]. They are
    taken off the queue afterwards, so no later worker runs them."""
    sent: list[tuple[str, list]] = []

    def receiver(sender=None, headers=None, body=None, **kwargs):
        sent.append((headers["task"], list(body[0])))

    after_task_publish.connect(receiver, weak=False)
    yield sent
    after_task_publish.disconnect(receiver)
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    queue = django_settings.CELERY_TASK_DEFAULT_QUEUE
    for raw in broker.lrange(queue, 0, -1):
        message = json.loads(raw)
        args = list(json.loads(base64.b64decode(message["body"]))[0])
        if (message["headers"]["task"], args) in sent:
            broker.lrem(queue, 1, raw)


@pytest.fixture
def health_run_taken():
    """A health check a worker has taken: its row, and the worker's lease."""
    run = HealthRun.objects.create(dataset=DatasetFactory(), lease_until=queued_until())
    return run, lease_take(HEALTH_JOB, run.pk)


def test_a_job_failing_at_the_database_goes_back_to_the_queue_at_once(
    settings, published, health_run_taken
):
    settings.LONG_JOB_DB_RETRY_SECONDS = 0.5
    run, lease = health_run_taken
    tries = []

    def body() -> None:
        tries.append(1)
        fail_at_the_database()

    assert lease_work(lease, body) is False
    run.refresh_from_db()
    assert len(tries) >= 2  # run again in place first
    assert run.state == HealthRunState.QUEUED  # not left running until its lease runs out
    assert run.lease_owner == "" and run.attempts == 1 and run.error == ""
    assert run.lease_until > timezone.now()  # sent again later if this message is lost
    assert published == [("datasets.health_run", [run.dataset_id])]
    with pytest.raises(LeaseLost):  # the failed attempt can no longer write
        lease.renew()
    assert lease_take(HEALTH_JOB, run.pk).attempt == 2  # the next worker takes it


def test_any_kind_failing_at_the_database_under_its_kept_lease_is_requeued_at_once(
    published, health_run_taken
):
    """A kind that runs its body under Lease.kept alone (no lease_work): the fault goes on up,
    and the row is back in the queue already."""
    run, lease = health_run_taken
    with pytest.raises(OperationalError), lease.kept():
        fail_at_the_database()
    run.refresh_from_db()
    assert run.state == HealthRunState.QUEUED and run.lease_owner == "" and run.attempts == 1
    assert published == [("datasets.health_run", [run.dataset_id])]


def test_a_job_is_run_again_in_place_once_the_database_answers(published, health_run_taken):
    run, lease = health_run_taken
    tries = []

    def body() -> None:
        tries.append(1)
        if len(tries) == 1:
            fail_at_the_database()
        lease.finish(HealthRunState.SUCCEEDED)

    assert lease_work(lease, body) is True
    run.refresh_from_db()
    assert len(tries) == 2
    assert run.state == HealthRunState.SUCCEEDED and run.attempts == 1
    assert published == []


def test_a_job_failing_at_the_database_on_its_last_attempt_fails_saying_why(settings, published):
    settings.LONG_JOB_DB_RETRY_SECONDS = 0.2
    run = HealthRun.objects.create(
        dataset=DatasetFactory(),
        lease_until=queued_until(),
        attempts=settings.LONG_JOB_MAX_ATTEMPTS - 1,
    )
    lease = lease_take(HEALTH_JOB, run.pk)

    assert lease_work(lease, fail_at_the_database) is False
    run.refresh_from_db()
    assert run.state == HealthRunState.FAILED and run.lease_owner == ""
    assert run.error.startswith(
        f"The health check was interrupted {settings.LONG_JOB_MAX_ATTEMPTS} times "
        "(its database connection failed: "
    )
    assert published == []


def test_an_import_from_disk_failing_at_the_database_fails_at_once_saying_why(
    settings, published, team
):
    """An import of a folder on the server's disk has no chunks to run again from later."""
    settings.LONG_JOB_DB_RETRY_SECONDS = 0.2
    dataset = dataset_create(access=team.access("editor"), name="From disk", task="detect")
    imp = Import.objects.create(
        dataset=dataset, filename="coco8", total_size=0, status=ImportStatus.QUEUED
    )
    lease = lease_take(IMPORT_JOB, imp.pk)

    assert lease_work(lease, fail_at_the_database) is False
    imp.refresh_from_db()
    assert imp.status == ImportStatus.FAILED and imp.attempts == 1
    assert imp.error.startswith("The import was interrupted (its database connection failed: ")
    assert imp.error.endswith(
        "and cannot be resumed, so it was not started again. Nothing was imported."
    )
    assert published == []
