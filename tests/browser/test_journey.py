"""The newcomer's journey (issue 16), as one person walks it, in Debian chromium, on a freshly
seeded install (`seed_demo`, as `make run` does) and nothing else: sign up; create a team and
invite a teammate, who accepts in a second browser; clone the demo from Explore; upload coco8 as
a zip and watch it import; open the health report; label two images (a box, a polygon) with
the keyboard; save a version; read the per-GPU estimate on the training form; train on "This
machine" (a quick test run, then a run that is watched live, stopped and resumed); open the
results and compare the runs on the project page; deploy the model; drop a picture on the demo
model's try-it page and see its boxes; create an API key and call the predict API with it;
export to ONNX and download it; find every credit the runs moved in the billing ledger.

Everything goes through the UI, except reading the confirmation mail (the server writes it to a
folder) and the predict call (made here with the key the page showed). The pages are served by
uvicorn (the job page's event stream is an async view), with a Celery worker, a training worker
and the shared model server, all on this test's database. Each step saves
var/screenshots/journey-NN-<step>.png (docs/tour.md shows some of them).
"""

import contextlib
import dataclasses
import io
import re
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.utils.text import slugify

from billing.ledger import account_for, credits_grant
from billing.models import LedgerEntry
from core.money import MICRO
from datasets.models import Dataset, Image, Label
from datasets.services.demo import CLASSES, DEMO_WORKSPACE, TRAIN, demo_images
from deploy.models import Deployment
from tests.browser.conftest import SCREENSHOT_DIR
from tests.browser.helpers import (
    EDITOR_READY,
    INVITE_LINK,
    click_and_load,
    confirm_address,
    drop_file,
    editor_click,
    editor_drag,
    editor_labels,
    editor_saved,
    file_mails,
    sign_up,
)
from tests.datasets.archives import SHARED, zip_folder
from tests.deploy.conftest import inference_server  # noqa: F401 (fixture)
from tests.servers import app_server
from tests.training.conftest import Workers
from training.models import GpuType, JobState, TrainedModel, TrainingJob
from training.recipes import SMALL_FROM_SCRATCH
from training.services.catalog import gpu_catalog_seed
from training.services.demo_model import DEMO_JOB_NAME, DEMO_PARAMS, DEMO_PROJECT, demo_val_found
from training.services.models import model_local_path
from workspaces.models import Workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

OWNER = "ada@example.com"
TEAMMATE = "grace@example.com"
TEAM = "Harbour Vision"
PHOTO = SHARED / "coco8" / "images" / "val" / "000000000036.jpg"
UMBRELLA = [(0.02, 0.45), (0.12, 0.2), (0.4, 0.08), (0.72, 0.1), (0.93, 0.3), (0.95, 0.5)]
UMBRELLA += [(0.7, 0.63), (0.3, 0.66)]  # its outline in PHOTO, roughly
# An admin prices "This machine" (in the Django admin) so that training moves credits.
LOCAL_PRICE = Decimal("3.60")  # per hour: a millicredit a second
# The runs train on the demo clone: coco8 as uploaded has warnings (most of its classes have
# labels in train but none in val), notes on the form (tests/training/test_data_checks.py).
TRAIN_ON = "Shapes (demo) v1"
# The runs train with what the form offers first, untouched (issue 33): offline, on 100 images,
# that is yolo26n from scratch with the "Small dataset from scratch" recipe (training/recipes.py).
EPOCHS, IMGSZ, BATCH = SMALL_FROM_SCRATCH.epochs, SMALL_FROM_SCRATCH.imgsz, SMALL_FROM_SCRATCH.batch
# Points on the quality chart (one per epoch), read from Chart.js itself.
POINTS = """() => {
  const canvas = document.querySelector('[data-chart=quality] canvas');
  const chart = canvas && Chart.getChart(canvas);
  return chart ? chart.data.labels.length : 0;
}"""


class Journey:
    """Numbers the steps; each ends with a full-page screenshot of its page,
    var/screenshots/journey-NN-<name>.png (…-FAILED.png when the step failed)."""

    def __init__(self):
        self.number = 0
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        for old in SCREENSHOT_DIR.glob("journey-*.png"):
            old.unlink()

    @contextlib.contextmanager
    def step(self, name: str, page, shot: str = ""):
        """`shot`: a selector whose element alone is pictured, when the page around it is long
        and says little."""
        self.number += 1
        path = SCREENSHOT_DIR / f"journey-{self.number:02d}-{name}.png"
        started = time.monotonic()
        try:
            yield
        except BaseException as exc:
            with contextlib.suppress(Exception):
                page.screenshot(path=str(path.with_suffix(".FAILED.png")), full_page=True)
            exc.add_note(f"journey step {self.number} ({name}), at {page.url}")
            raise
        finally:  # in the captured output of a failure: where the journey's time went
            print(f"journey step {self.number} ({name}): {time.monotonic() - started:.1f} s")
        if shot:
            page.locator(shot).screenshot(path=str(path))
        else:
            page.screenshot(path=str(path), full_page=True)


@pytest.fixture
def install(transactional_db, tmp_path, inference_server):  # noqa: F811
    """A fresh install as `make run` leaves it (`seed_demo`: plans, machines, the demo team, its
    public Shapes dataset and the job that trains the demo model, queued), its web server under
    uvicorn writing mail to a folder, a Celery worker, a training worker and the shared model
    server. Yields (base URL, mail folder)."""
    gpu_catalog_seed()
    GpuType.objects.filter(slug="local").update(hourly_price=LOCAL_PRICE)  # kept by the seed
    call_command("seed_demo", stdout=io.StringIO())
    mail = tmp_path / "mail"
    mail.mkdir()
    env = {
        "EMAIL_URL": f"filemail:///{mail}",
        "ACCOUNT_EMAIL_VERIFICATION": "mandatory",
        "INFERENCE_URL": inference_server.url,
    }
    workers = Workers()
    workers.start()
    try:
        with app_server(**env) as base:
            yield base, mail
    finally:
        workers.stop_all()


@pytest.mark.same_on_any_database(
    "the newcomer's journey is `make run`'s, on SQLite; every step's rows are tested on "
    "PostgreSQL by the tests of its app",
    on="sqlite",
)
def test_the_newcomers_journey(
    install, celery_worker_process, new_page_at, browser_problems, tmp_path
):
    base, mail = install
    cache.clear()  # allauth's signup/login rate limits live in the (Redis) cache
    journey = Journey()
    owner = new_page_at(base, "A:owner")

    slug = sign_up_and_create_team(journey, owner, mail)
    # Confirmed: the person's sign-up credits, once, in their personal workspace; their new
    # team starts with none, so an administrator grants it some for the priced runs below.
    assert account_for(Workspace.objects.get(created_by__email=OWNER, is_personal=True)).balance
    team = Workspace.objects.get(slug=slug)
    assert account_for(team).balance == 0
    credits_grant(team, 20 * MICRO, reason="Pilot: the journey's runs")
    invite_teammate(journey, owner, new_page_at(base, "B:teammate"), slug, mail)
    shapes = clone_the_demo(journey, owner, slug)
    dataset = upload_coco8(journey, owner, slug, tmp_path)
    read_the_health_report(journey, owner)
    label_a_box_and_a_polygon(journey, owner, slug, dataset)
    save_a_version(journey, owner, dataset, "coco8 and one more box")
    save_a_version(journey, owner, shapes, "the demo, as cloned")
    project_url = create_a_project(journey, owner, slug)
    read_the_estimates(journey, owner)
    quick = quick_test_run(journey, owner)
    job = train_watch_stop_resume(journey, owner, project_url)
    model_finds_the_shapes(job)
    open_the_results(journey, owner)
    compare_the_runs(journey, owner, quick, job)
    model = job.model
    deployment = deploy_the_model(journey, owner, model)
    shapes_photo = tmp_path / "shapes.jpg"  # a picture like the demo's (its first val image)
    shapes_photo.write_bytes(demo_images()[TRAIN][0])
    try_the_demo_model(journey, owner, shapes_photo)
    raw_key = create_an_api_key(journey, owner, slug)
    call_the_predict_api(journey, owner, base, raw_key, model, deployment, shapes_photo)
    export_to_onnx(journey, owner, model)
    read_the_ledger(journey, owner, [quick, job])

    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
    # Leaving a job page ends its event stream: the browser reports that request as aborted.
    failed = [f for f in browser_problems.failed_requests if "/events" not in f]
    assert not failed, failed
    assert not browser_problems.bad_responses, browser_problems.bad_responses


# --- the steps ------------------------------------------------------------------------------


def sign_up_and_create_team(journey: Journey, page, mail: Path) -> str:
    with journey.step("landing", page):
        page.goto("/")
        assert page.get_by_role("link", name="Create an account").is_visible()
    with journey.step("signup", page):
        click_and_load(page, page.get_by_role("link", name="Create an account"))
        sign_up(page, OWNER)
    with journey.step("address-confirmed", page):
        confirm_address(page, OWNER, file_mails(mail))
        assert page.get_by_text("Personal workspace").is_visible()
    with journey.step("team-created", page):
        switcher = page.get_by_test_id("workspace-switcher")
        switcher.locator("summary").click()
        click_and_load(page, switcher.get_by_role("link", name="+ New team workspace"))
        page.locator("main [name=name]").fill(TEAM)
        click_and_load(page, page.get_by_role("button", name="Create workspace"))
        assert page.get_by_role("heading", level=1).inner_text() == TEAM
        slug = re.search(r"/w/([\w-]+)/$", page.url).group(1)
    return slug


def invite_teammate(journey: Journey, owner, teammate, slug: str, mail: Path) -> None:
    with journey.step("invitation-sent", owner):
        click_and_load(owner, owner.get_by_role("link", name="Members and invitations"))
        form = owner.locator("main form[action$='/members/invite/']")
        form.locator("[name=email]").fill(TEAMMATE)
        form.locator("select[name=role]").select_option(label="Editor")
        click_and_load(owner, form.get_by_role("button", name="Send invitation"))
        assert f"Invitation sent to {TEAMMATE}." in owner.locator(".messages").inner_text()
    invitation = [m for m in file_mails(mail) if m.to == [TEAMMATE]]
    assert len(invitation) == 1 and TEAM in invitation[0].subject, invitation
    link = INVITE_LINK.search(invitation[0].body).group(0)

    with journey.step("teammate-signs-up", teammate):
        teammate.goto(link)
        click_and_load(teammate, teammate.get_by_role("link", name="create an account"))
        sign_up(teammate, TEAMMATE)
        confirm_address(teammate, TEAMMATE, file_mails(mail))
        assert teammate.get_by_role("heading", level=1).inner_text() == f"Join {TEAM}"
    with journey.step("teammate-joined", teammate):
        click_and_load(teammate, teammate.get_by_role("button", name="Accept and join"))
        assert teammate.url.endswith(f"/w/{slug}/"), teammate.url
        assert teammate.get_by_test_id("my-role").inner_text() == "editor"
    with journey.step("members", owner):
        owner.reload()
        assert TEAMMATE in owner.get_by_test_id("members").inner_text()


def clone_the_demo(journey: Journey, page, slug: str) -> Dataset:
    with journey.step("explore", page):
        click_and_load(page, page.locator("header").get_by_role("link", name="Explore"))
        assert "Shapes (demo)" in page.get_by_test_id("public-datasets").inner_text()
    with journey.step("demo-dataset", page):
        click_and_load(page, page.get_by_role("link", name="Shapes (demo)"))
        assert page.get_by_test_id("thumbs").locator("img").count() > 0
    with journey.step("demo-cloned", page):
        page.get_by_test_id("clone").locator("select").select_option(slug)
        click_and_load(page, page.get_by_test_id("clone").get_by_role("button", name="Clone"))
        assert re.search(rf"/w/{slug}/datasets/\d+/$", page.url), page.url
        assert "cloned from Shapes (demo)" in page.locator("main").inner_text()
        assert "120 images" in page.locator("main").inner_text()
    return Dataset.objects.get(workspace__slug=slug, cloned_from__isnull=False)


def upload_coco8(journey: Journey, page, slug: str, tmp_path: Path) -> Dataset:
    archive = zip_folder(SHARED / "coco8", tmp_path / "coco8.zip", prefix="coco8/")
    with journey.step("new-dataset", page):
        click_and_load(page, page.locator("nav.mainnav").get_by_role("link", name="Datasets"))
        click_and_load(page, page.get_by_role("link", name="New dataset"))
        page.fill("main [name=name]", "Street scenes")
        page.select_option("main select[name=task]", "detect")
        click_and_load(page, page.locator("main form button[type=submit]"))
        dataset = Dataset.objects.get(name="Street scenes")
    with journey.step("upload-picked", page):
        click_and_load(page, page.get_by_test_id("add-images"))
        with page.expect_file_chooser() as chooser:
            page.get_by_text("choose files").click()
        chooser.value.set_files(str(archive))
        assert "coco8.zip" in page.inner_text("#selection")
    with journey.step("import-done", page):
        page.click("#start-upload")
        page.wait_for_url(re.compile(r"/imports/\d+/$"), timeout=60_000)
        page.wait_for_selector(
            "[data-testid=import-status][data-status=succeeded]", timeout=120_000
        )
        assert "8" in page.inner_text("[data-testid=import-status]")
    assert dataset.images.count() == 8
    return dataset


def read_the_health_report(journey: Journey, page) -> None:
    with journey.step("health-report", page):
        click_and_load(page, page.locator(".crumbs").get_by_role("link", name="Street scenes"))
        click_and_load(page, page.get_by_role("link", name="Health report →"))
        for _ in range(90):  # the check runs in the worker after the import
            if "Not checked yet" not in page.inner_text("[data-testid=health-last-run]"):
                break
            page.wait_for_timeout(1000)
            page.reload()
        assert "Last checked" in page.inner_text("[data-testid=health-last-run]")


def label_a_box_and_a_polygon(journey: Journey, page, slug: str, dataset: Dataset) -> None:
    """A box on a coco8 photo, then a polygon in a dataset of outlines (a detection dataset
    offers boxes only), both drawn with the mouse and driven by the editor's keys."""
    with journey.step("box-drawn", page):
        page.goto(f"/w/{slug}/datasets/{dataset.pk}/images/")
        page.get_by_test_id("tile-annotate").first.click()
        page.wait_for_function(EDITOR_READY)
        image_id = int(re.search(r"/images/(\d+)/annotate/", page.url).group(1))
        before = len(editor_labels(page))
        page.keyboard.press("b")  # the box tool
        editor_drag(page, (0.05, 0.05), (0.3, 0.35))
        page.keyboard.press("3")  # the third class
        labels = editor_labels(page)
        assert len(labels) == before + 1 and labels[-1]["kind"] == "box"
        third = dataset.classes.get(index=2)
        assert labels[-1]["class_id"] == third.pk
        editor_saved(page, 1)
        assert Label.objects.filter(image_id=image_id, dataset_class=third).exists()

    with journey.step("outlines-dataset", page):
        page.goto(f"/w/{slug}/datasets/new/")
        page.fill("main [name=name]", "Outlines")
        page.select_option("main select[name=task]", "segment")
        page.fill("main [name=classes]", "umbrella\nperson")
        click_and_load(page, page.locator("main form button[type=submit]"))
        click_and_load(page, page.get_by_test_id("add-images"))
        drop_file(page, PHOTO)  # a photo dragged from the desktop onto the drop zone
        page.click("#start-upload")
        page.wait_for_selector("[data-testid=import-status][data-status=succeeded]", timeout=60_000)
    outlines = Dataset.objects.get(name="Outlines")
    image = Image.objects.get(dataset=outlines)

    with journey.step("polygon-drawn", page):
        page.goto(f"/w/{slug}/datasets/{outlines.pk}/images/{image.pk}/annotate/")
        page.wait_for_function(EDITOR_READY)
        page.keyboard.press("p")  # the polygon tool
        for x, y in UMBRELLA:
            editor_click(page, x, y)
        page.keyboard.press("Enter")  # closes it
        page.keyboard.press("1")  # umbrella
        labels = editor_labels(page)
        assert [lb["kind"] for lb in labels] == ["polygon"]
        assert len(labels[0]["data"]) == 2 * len(UMBRELLA)
        editor_saved(page, 1)
        assert Label.objects.get(image=image).kind == "polygon"


def save_a_version(journey: Journey, page, dataset: Dataset, note: str) -> None:
    with journey.step(f"{slugify(dataset.name)}-version-saved", page):
        click_and_load(page, page.locator("nav.mainnav").get_by_role("link", name="Datasets"))
        click_and_load(page, page.get_by_test_id("datasets").get_by_role("link", name=dataset.name))
        page.fill("#version-note", note)
        click_and_load(page, page.get_by_test_id("versions").get_by_role("button"))
        assert page.url.endswith(f"/datasets/{dataset.pk}/versions/1/"), page.url
        saved = f"Saved version 1 of {dataset.name}."
        assert saved in page.locator(".messages").inner_text()
    assert dataset.versions.count() == 1


def create_a_project(journey: Journey, page, slug: str) -> str:
    with journey.step("project-created", page):
        click_and_load(page, page.locator("nav.mainnav").get_by_role("link", name="Projects"))
        click_and_load(page, page.get_by_role("link", name="New project"))
        page.fill("main [name=name]", "Street detector")
        click_and_load(page, page.get_by_role("button", name="Create project"))
        assert page.get_by_role("heading", level=1).inner_text() == "Street detector"
        assert "No runs yet" in page.inner_text("[data-testid=project-jobs]")
    return page.url


ESTIMATE_IDLE = """() => {
  const box = document.getElementById('estimates');
  return box && !box.classList.contains('htmx-request');
}"""


def _fill_the_form(page) -> None:
    """What a person picks: the data to train on, and nothing else (issue 33: the form's
    defaults train a model that finds things). The version's change re-estimates (htmx), and
    the recipe follows the version's size; the test waits for both, as a person reading the
    estimates would."""
    page.wait_for_function(ESTIMATE_IDLE, timeout=120_000)
    version = page.locator("select[name=dataset_version] option", has_text=TRAIN_ON)
    page.select_option("select[name=dataset_version]", version.get_attribute("value"))
    page.wait_for_function(ESTIMATE_IDLE, timeout=120_000)
    # Offline (downloads are off in the tests), so the form offers "From scratch" first and,
    # on 100 images, the demo's own recipe: 20 epochs at 128 px, batch 8, AdamW.
    assert page.input_value("select[name=model_family]") == "yolo26"
    assert page.is_checked("input[name=weights][value=scratch]")
    assert page.is_checked("input[name=recipe][value=small-scratch]")
    page.wait_for_function(
        "(text) => document.getElementById('estimates').innerText.includes(text)",
        arg=f"{EPOCHS} epochs at {IMGSZ} px, batch {BATCH}",
        timeout=120_000,
    )


def read_the_estimates(journey: Journey, page) -> None:
    with journey.step("estimates", page, shot="[data-testid=estimates]"):
        # The form estimates every machine before it answers: 7-16 s here (see the report).
        click_and_load(page, page.get_by_test_id("train-button"), timeout=120_000)
        assert page.locator("[data-testid=machine-local] input").is_checked()
        _fill_the_form(page)
        page.locator("[data-testid=estimates]").scroll_into_view_if_needed()
        rows = page.locator("[data-testid=estimates] tbody tr")
        assert rows.count() >= 3
        local = page.get_by_test_id("estimate-local").inner_text()
        assert "This machine" in local and "$" in local  # priced by the admin
        h200 = page.get_by_test_id("estimate-h200").inner_text()
        assert "fits" in h200 and "$" in h200
        assert page.get_by_test_id("badge-cheapest").count() == 1
        assert page.get_by_test_id("badge-fastest").count() == 1


def quick_test_run(journey: Journey, page) -> TrainingJob:
    with journey.step("quick-test-done", page):
        click_and_load(page, page.get_by_test_id("quick-test"))
        assert re.search(r"/training/jobs/\d+/$", page.url), page.url
        # It waits its turn behind the demo job (queued first, on the same machine: about two
        # minutes of CPU, several on a busy machine).
        return _ended(page, TrainingJob.objects.filter(is_quick_test=True))


ENDED = (
    "[data-testid=job-status]"
    ":is([data-state=succeeded], [data-state=failed], [data-state=canceled])"
)


def _ended(page, jobs) -> TrainingJob:
    """Wait until the job page shows the one job of `jobs` ended, and that it succeeded: 15
    minutes at most (each run takes 1.5-3.5 min here, alone or beside a full suite, and CI's
    machine can be twice as slow). A failure says where every job of the install stands and
    whether the page still follows it: a failed run is told from a slow one, a run waiting its
    turn from one never picked up, and a page that stopped following from both."""

    def where() -> str:
        jobs_now = "\n".join(
            f"job {j.pk} ({j.name}): {j.state}, epoch {j.epochs_done}, attempts {j.attempts}, "
            f"lost {j.lost_attempts}, lease {j.lease_owner or '-'} until {j.lease_until}, "
            f"updated {j.updated_at:%H:%M:%S}, error {j.error!r}"
            for j in TrainingJob.objects.order_by("pk")
        )
        page_now = "?"
        with contextlib.suppress(Exception):
            stream = page.get_attribute("#job-live", "data-stream")
            page_now = f"stream {stream}, note {page.inner_text('[data-testid=job-live-note]')!r}"
        return f"at {time.strftime('%H:%M:%S')}, the page: {page_now}\n{jobs_now}"

    try:
        page.locator(ENDED).wait_for(timeout=900_000)
    except Exception as exc:
        exc.add_note(where())
        raise
    job = jobs.get()
    assert job.state == JobState.SUCCEEDED, where()
    return job


def train_watch_stop_resume(journey: Journey, page, project_url: str) -> TrainingJob:
    with journey.step("training-live", page):
        page.goto(project_url)
        click_and_load(page, page.get_by_test_id("train-button"), timeout=120_000)
        _fill_the_form(page)
        page.fill("input[name=name]", "first real run")
        click_and_load(page, page.get_by_test_id("start-training"))
        page.locator("[data-testid=job-status][data-state=running]").wait_for(timeout=120_000)
        page.click("#tab-charts")
        # The chart gains its first point live, without a reload.
        page.wait_for_function(f"() => ({POINTS})() >= 1", timeout=180_000)
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    job = TrainingJob.objects.get(name="first real run")

    with journey.step("stopped", page):
        page.click("[data-testid=job-stop]")
        page.locator("[data-testid=job-status][data-state=stopped]").wait_for(timeout=120_000)
        job.refresh_from_db()
        assert job.state == JobState.STOPPED and job.checkpoint_epoch < EPOCHS, job.state
        assert page.get_by_test_id("job-resume").is_visible()
        # A stopped job holds no credits while it waits, and the header says so live, without
        # a reload (issue 16: it said "0.885326 more held" until one).
        page.get_by_test_id("job-cost-held").wait_for(state="hidden", timeout=30_000)
        assert "Credits used" in page.inner_text("[data-testid=job-cost]")
        assert "held" not in page.inner_text("[data-testid=job-cost]")
    with journey.step("resumed-and-done", page):
        page.click("[data-testid=job-resume]")
        job = _ended(page, TrainingJob.objects.filter(pk=job.pk))
        # All its epochs, or fewer when the recipe's patience ended it early.
        assert job.state == JobState.SUCCEEDED and job.attempts == 2
        assert 0 < job.epochs_done <= EPOCHS
        done = f"Epoch {job.epochs_done} of {EPOCHS}"
        assert done in page.inner_text("[data-testid=job-progress]")
        page.click("#tab-charts")
        page.wait_for_function(f"() => ({POINTS})() === {job.epochs_done}")
    assert TrainedModel.objects.filter(job=job).exists()
    return job


def model_finds_the_shapes(job: TrainingJob) -> None:
    """The run the form's defaults made, stopped and resumed on the way, finds the val images'
    shapes as the demo model does (right class, confidence above 0.5, IoU >= 0.5)."""
    shapes, drawn = demo_val_found(model_local_path(job.model))
    print(f"\nthe defaults' model: {shapes} of {drawn} val shapes found, {job.epochs_done} epochs")
    assert shapes >= 0.8 * drawn, (shapes, drawn)


def open_the_results(journey: Journey, page) -> None:
    with journey.step("results", page):
        page.click("#tab-results")
        results = page.locator("#panel-results")
        results.get_by_test_id("results-final").wait_for(timeout=30_000)
        assert results.locator("img").count() >= 1


def compare_the_runs(journey: Journey, page, quick: TrainingJob, job: TrainingJob) -> None:
    with journey.step("project-runs", page):
        click_and_load(page, page.locator(".crumbs a").last)
        assert page.locator("[data-testid=run-row]").count() == 2
    with journey.step("compare", page):
        page.check(f"[data-testid=pick-{quick.pk}]")
        page.check(f"[data-testid=pick-{job.pk}]")
        click_and_load(page, page.get_by_test_id("compare-button"))
        assert "/compare/?" in page.url
        page.wait_for_function(
            "() => window.Chart && Chart.getChart(document.getElementById('chart-metric'))"
        )
        labels = page.evaluate(
            "() => Chart.getChart(document.getElementById('chart-metric'))"
            ".data.datasets.map((d) => d.label)"
        )
        assert sorted(labels) == sorted([quick.title, job.title]), labels


def deploy_the_model(journey: Journey, page, model: TrainedModel) -> Deployment:
    with journey.step("model", page):
        page.goto(f"/w/{model.workspace.slug}/training/jobs/{model.job_id}/")
        click_and_load(page, page.locator("[data-testid=job-model] a"))
        assert page.url.endswith(f"/models/{model.pk}/")
    with journey.step("deployed", page):
        click_and_load(page, page.get_by_test_id("model-deploy"))
        form = page.get_by_test_id("deploy-form")
        assert form.locator("select[name=model]").input_value() == str(model.pk)
        form.locator("[name=name]").fill("streets live")
        click_and_load(page, form.get_by_test_id("deploy"))
        page.locator("[data-testid=deployment-status][data-state=running]").wait_for(
            timeout=120_000
        )
    deployment = Deployment.objects.get(model=model)
    assert f"/d/{deployment.slug}/predict" in page.inner_text("[data-testid=endpoint-url]")
    return deployment


def try_the_demo_model(journey: Journey, page, shapes_photo: Path) -> None:
    """The demo model (trained by the first start: seed_demo queued its job before any of the
    newcomer's, on the same machine) is tried from the demo dataset's Explore page."""
    with journey.step("demo-model-tried", page):
        click_and_load(page, page.locator("header").get_by_role("link", name="Explore"))
        click_and_load(page, page.get_by_role("link", name="Shapes (demo)"))
        for _ in range(300):  # it is public once its job has succeeded
            if page.get_by_test_id("try-public-model").count():
                break
            page.wait_for_timeout(1000)
            page.reload()
        else:
            demo = TrainingJob.objects.get(workspace__name=DEMO_WORKSPACE, name=DEMO_JOB_NAME)
            raise AssertionError(f"the demo job is {demo.state}: {demo.error}")
        click_and_load(page, page.get_by_test_id("try-public-model"))
        assert re.search(r"/explore/models/\d+/try/$", page.url), page.url
        drop_file(page, shapes_photo)
        page.wait_for_function(
            "() => window.kestrelTry && window.kestrelTry.ready()", timeout=60_000
        )
        assert page.evaluate("window.kestrelTry.error()") == ""
        assert page.evaluate("window.kestrelTry.requests()") == 1
        assert page.evaluate("window.kestrelTry.shown()") > 0  # boxes drawn over the picture
        found = page.inner_text("[data-testid=try-results]")
        assert any(shape in found for shape in CLASSES), found
    demo_model_checks()


def demo_model_checks() -> None:
    """What the first start made: the demo job trained the real demo settings, and its model
    is the demo project's current one, public, and finds the val images' shapes (right class,
    confidence above 0.5, IoU >= 0.5). The only test that trains the demo: on SQLite, as the
    quick start does (on PostgreSQL too when that run is alone)."""
    job = TrainingJob.objects.get(workspace__name=DEMO_WORKSPACE, name=DEMO_JOB_NAME)
    assert job.state == JobState.SUCCEEDED, job.error
    assert {f.name: getattr(job, f.name) for f in dataclasses.fields(DEMO_PARAMS)} == (
        dataclasses.asdict(DEMO_PARAMS)
    )
    seconds = (job.finished_at - job.started_at).total_seconds()
    print(f"\ndemo job: {job.epochs_done} epochs, {seconds:.0f} s from start to succeeded")
    model = TrainedModel.objects.get(job=job)
    assert model.is_current and model.is_public
    assert model.project.name == DEMO_PROJECT
    assert model.class_names == CLASSES
    shapes, drawn = demo_val_found(model_local_path(model))
    print(f"demo model: {shapes} of {drawn} val shapes found with confidence > 0.5")
    assert shapes >= 0.8 * drawn


def create_an_api_key(journey: Journey, page, slug: str) -> str:
    with journey.step("api-key", page):
        page.goto(f"/w/{slug}/")
        click_and_load(page, page.get_by_role("link", name="API keys"))
        page.fill("main [name=name]", "journey script")
        page.check("main input[name=scopes][value=predict]")
        click_and_load(page, page.get_by_role("button", name="Create key"))
        raw = page.get_by_test_id("new-key").inner_text().strip()
        assert re.fullmatch(r"ul_[0-9a-f]{40}", raw), raw  # the form `yolo login` keeps
    return raw


def call_the_predict_api(
    journey: Journey,
    page,
    base: str,
    raw_key: str,
    model: TrainedModel,
    deployment: Deployment,
    photo: Path,
) -> None:
    headers = {"Authorization": f"Bearer {raw_key}"}
    for url in (f"{base}/api/v1/models/{model.pk}/predict", f"{base}/d/{deployment.slug}/predict"):
        with photo.open("rb") as f:
            response = httpx.post(
                url, headers=headers, files={"file": (photo.name, f, "image/jpeg")}, timeout=60
            )
        assert response.status_code == 200, (url, response.text)
        body = response.json()
        assert body["metadata"]["imageCount"] == 1, body
        assert len(body["images"][0]["shape"]) == 2, body
    refused = httpx.post(f"{base}/d/{deployment.slug}/predict", timeout=30)
    assert refused.status_code == 401
    with journey.step("key-used", page):
        # Not a reload: that would send the form again, and make a second key.
        page.goto(f"/w/{model.workspace.slug}/")
        click_and_load(page, page.get_by_role("link", name="API keys"))
        row = page.get_by_test_id("keys").locator("tr", has_text="journey script")
        assert row.locator("td").nth(4).inner_text() != "never"  # last used: just now


def export_to_onnx(journey: Journey, page, model: TrainedModel) -> None:
    with journey.step("onnx-exported", page):
        page.goto(f"/w/{model.workspace.slug}/models/{model.pk}/")
        page.get_by_test_id("export-onnx").click()
        download = page.locator("[data-testid^=export-download-]")
        download.wait_for(timeout=180_000)
        with page.expect_download() as info:
            download.click()
        path = Path(info.value.path())
    import onnx

    graph = onnx.load(str(path)).graph
    assert graph.input and graph.output
    assert info.value.suggested_filename.endswith(".onnx"), info.value.suggested_filename


def _micro(text: str) -> int:
    return int(Decimal(text.replace(",", "")) * MICRO)


def read_the_ledger(journey: Journey, page, jobs: list[TrainingJob]) -> None:
    """Every ledger entry of the runs, paged through on the billing page, is the ledger's own
    (kind and amount, newest first), and the runs' captures add up to their cost."""
    titles = {job.pk: job.title for job in jobs}
    shown: dict[int, list[tuple[str, int]]] = {job.pk: [] for job in jobs}
    with journey.step("billing", page):
        click_and_load(page, page.locator("nav.mainnav").get_by_role("link", name="Billing"))
        costs = page.get_by_test_id("job-costs")
        spent, held = {}, {}
        for job in jobs:
            cells = costs.locator("tr", has_text=titles[job.pk]).locator("td").all_inner_texts()
            spent[job.pk], held[job.pk] = _micro(cells[1]), _micro(cells[3])
        while True:
            for row in page.get_by_test_id("ledger-entry").all():
                cells = row.locator("td").all_inner_texts()
                for pk, title in titles.items():
                    if title in cells[5]:
                        shown[pk].append((cells[1], _micro(cells[2])))
            older = page.locator("nav.pager").get_by_role("link", name="Older")
            if not older.count():
                break
            click_and_load(page, older)
        page.goto(page.url.split("?")[0])  # the newest page, for the screenshot
    for job in jobs:
        entries = LedgerEntry.objects.filter(job_id=job.pk).order_by("-created_at", "-pk")
        assert shown[job.pk] == [(e.get_kind_display(), e.amount) for e in entries], job.title
        kinds = {kind for kind, _ in shown[job.pk]}
        assert {"Hold", "Capture", "Release"} <= kinds, kinds
        captured = -sum(amount for kind, amount in shown[job.pk] if kind == "Capture")
        assert captured == spent[job.pk] > 0, (job.title, captured, spent[job.pk])
        assert held[job.pk] == 0  # nothing stays held once a run has ended
