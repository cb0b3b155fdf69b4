"""A labelling tool's export dropped on the Upload page as it came out of the tool: a real CVAT
project export (zip), and a real Label Studio JSON beside its image (loose files). The import
page names the format, every shape arrives or is named, and the gallery draws them."""

import io
import re

import pytest
from django.core.cache import cache
from PIL import Image as PILImage

from datasets.models import Dataset, Label
from tests.browser.helpers import log_in
from tests.datasets.archives import zip_folder
from tests.datasets.test_formats_cvat import FIXTURES as CVAT
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
STUDIO = CVAT.parent / "labelstudio"


def _upload(page, slug: str, name: str, task: str, files: list) -> Dataset:
    page.goto(f"/w/{slug}/datasets/new/")
    page.fill("input[name=name]", name)
    page.select_option("select[name=task]", task)
    with page.expect_navigation():
        page.click("form button[type=submit]")
    with page.expect_navigation():
        page.click("[data-testid=add-images]")
    page.set_input_files("[data-testid=pick-files]", [str(f) for f in files])
    page.click("#start-upload")
    page.wait_for_url(re.compile(r"/imports/\d+/$"), timeout=60_000)
    page.wait_for_selector("[data-testid=import-status][data-status=succeeded]", timeout=90_000)
    return Dataset.objects.get(name=name)


def test_cvat_and_label_studio_exports_through_the_upload_page(
    new_page, screenshot, browser_problems, celery_worker_process, plans, tmp_path
):
    cache.clear()
    owner = UserFactory(email="labeller@example.com")
    team = WorkspaceFactory(name="Label Lab", slug="label-lab")
    MembershipFactory(workspace=team, user=owner, role=Role.OWNER)
    page = new_page("owner")
    log_in(page, owner.email)

    archive = zip_folder(CVAT / "for_images" / "export_project", tmp_path / "cvat-project.zip")
    dataset = _upload(page, "label-lab", "From CVAT", "segment", [archive])
    assert page.inner_text("[data-testid=report-format]") == "CVAT for images 1.1"
    refused = page.inner_text("[data-testid=not-imported-label]")
    assert "polyline shapes are not imported: Kestrel has no line labels" in refused
    notes = page.inner_text("[data-testid=report-notes]")
    assert "attribute values (a1, a2, a3, a4) not kept" in notes
    assert Label.objects.filter(image__dataset=dataset).count() == 6
    screenshot(page, "import-cvat-project")

    # Label Studio's JSON export and the image it names (/data/upload/29/example.png).
    image = tmp_path / "example.png"
    buf = io.BytesIO()
    PILImage.new("RGB", (128, 128), (30, 90, 160)).save(buf, format="PNG")
    image.write_bytes(buf.getvalue())
    export = tmp_path / "project-29-export.json"
    export.write_bytes((STUDIO / "polygon_example.json").read_bytes())
    dataset = _upload(page, "label-lab", "From Label Studio", "segment", [export, image])
    assert page.inner_text("[data-testid=report-format]") == "Label Studio JSON"
    assert page.locator("[data-testid=import-warning]").count() == 0
    label = Label.objects.get(image__dataset=dataset)
    assert label.kind == "polygon"
    screenshot(page, "import-label-studio")
    page.goto(f"/w/label-lab/datasets/{dataset.pk}/images/")
    assert page.locator("[data-testid=gallery] svg polygon").count() == 1
    screenshot(page, "gallery-label-studio")
