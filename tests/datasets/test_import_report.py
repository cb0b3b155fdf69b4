"""The import report leads with what was not imported (issue 19): by kind and count, each kind
expandable to its files, the whole list as a JSON download; an import that found labels and
imported none of them is a warning in the page's header, and `manage.py dataset_import` says
the same and exits non-zero."""

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from datasets.services.datasets import dataset_create
from datasets.services.import_report import FILES_SHOWN
from datasets.services.ingest import dataset_import_path
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.workspaces.factories import UserFactory

pytestmark = pytest.mark.django_db


def _import(team, files: dict, tmp_path, name="Report"):
    access = team.access("editor")
    dataset = dataset_create(access=access, name=name, task="detect")
    return dataset_import_path(
        access=access, dataset=dataset, path=zip_of(files, tmp_path / f"{name}.zip")
    )


def _page(client, team, imp) -> str:
    client.force_login(team.viewer)
    url = reverse("import_detail", kwargs={"ws_slug": "acme", "import_pk": imp.pk})
    return client.get(url).content.decode()


def test_what_was_not_imported_is_counted_by_kind_after_what_was(team, tmp_path, client):
    files = {
        "data.yaml": b"names: ['cat', 'dog', 'bird']\n",
        "images/train/a.jpg": jpeg_bytes(color=(10, 10, 10)),
        "images/train/b.jpg": jpeg_bytes(color=(90, 10, 10)),
        "images/train/broken.jpg": b"not a jpeg at all",
        "labels/train/a.txt": b"0 0.5 0.5 0.2 0.2\n7 0.5 0.5 0.1 0.1\nnonsense\n",
        "labels/train/b.txt": b"1 0.5 0.5 0.3 0.3\n",
        "labels/train/gone.txt": b"0 0.5 0.5 0.2 0.2\n",
        "notes.pdf": b"%PDF-1.4",
    }
    imp = _import(team, files, tmp_path)
    report = imp.report
    assert report["images_imported"] == 2 and report["labels_imported"] == 2
    groups = {g["kind"]: g for g in report["not_imported"]}
    assert [g["kind"] for g in report["not_imported"]] == [
        "no_image",
        "label",
        "image",
        "file",
    ]
    assert groups["no_image"]["count"] == 1
    assert groups["no_image"]["files"] == [
        {"file": "labels/train/gone.txt", "reason": "label file without a matching image"}
    ]
    assert groups["label"]["count"] == 2  # class 7 of 3, and a line that is not a label
    assert {f["file"] for f in groups["label"]["files"]} == {
        "labels/train/a.txt:2",
        "labels/train/a.txt:3",
    }
    assert groups["image"]["count"] == 1 and groups["image"]["files"][0]["file"].endswith(
        "broken.jpg"
    )
    # A declared class without labels was not lost: one line of the summary (issue 33).
    assert report["classes_without_labels"] == ["bird"]
    assert groups["file"]["files"][0]["file"] == "notes.pdf"
    assert report["warning"] == ""

    page = _page(client, team, imp)
    assert page.index('data-testid="import-report"') < page.index(
        'data-testid="report-not-imported"'
    )
    assert "1 declared class has no label yet: bird." in page
    assert re.search(
        r'data-testid="not-imported-no_image" open>\s*<summary><strong>Label files that matched '
        r'no image</strong>: <span data-testid="not-imported-count">1</span>',
        page,
    )
    assert "Labels refused</strong>" in page and "Classes with no labels" not in page
    assert '<bdi class="filename">labels/train/gone.txt</bdi>' in page
    assert 'data-testid="import-warning"' not in page
    assert 'data-testid="import-status-heading">Imported</h2>' in page


def test_the_full_report_downloads_as_json_for_members_only(team, tmp_path, client):
    files = {"a.jpg": jpeg_bytes()}
    files |= {f"docs/{i:03}.pdf": b"%PDF" for i in range(FILES_SHOWN + 10)}
    imp = _import(team, files, tmp_path, name="Many")
    page = _page(client, team, imp)
    assert "…and 10 more in the full report." in page
    url = reverse("import_report_download", kwargs={"ws_slug": "acme", "import_pk": imp.pk})
    assert f'href="{url}"' in page
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert f'filename="import-{imp.pk}-report.json"' in response["Content-Disposition"]
    whole = json.loads(response.content)
    unused = [s for s in whole["skipped"] if s["kind"] == "file"]
    assert len(unused) == FILES_SHOWN + 10
    assert whole["images_imported"] == 1

    stranger = Client()
    stranger.force_login(UserFactory())
    missing = reverse("import_report_download", kwargs={"ws_slug": "acme", "import_pk": 10**9})
    assert stranger.get(url).status_code == 404
    assert stranger.get(missing).status_code == 404


def test_labels_found_but_none_imported_is_a_warning_on_the_page(team, tmp_path, client):
    files = {
        "photos/a.jpg": jpeg_bytes(color=(10, 10, 10)),
        "photos/a.txt": b"0 0.5 0.5 0.2 0.2\n",  # beside the image, in no layout Kestrel knows
        "photos/b.jpg": jpeg_bytes(color=(90, 10, 10)),
        "photos/b.json": b'{"made_by": "a tool Kestrel does not know"}',
    }
    imp = _import(team, files, tmp_path)
    report = imp.report
    assert report["images_imported"] == 2 and report["labels_imported"] == 0
    assert report["labels_found"] == 2
    assert report["warning"] == (
        "Images were imported, but none of the 2 label files or labels found: see what was not "
        "imported below."
    )
    page = _page(client, team, imp)
    assert 'data-testid="import-status-heading">Imported, with a warning</h2>' in page
    assert 'data-testid="import-warning"><p>Images were imported, but none' in page
    assert "Label files not read</strong>" in page


def test_the_command_prints_what_was_not_imported_and_fails_when_no_label_was(team, tmp_path):
    folder = tmp_path / "beside"
    (folder / "photos").mkdir(parents=True)
    (folder / "photos" / "a.jpg").write_bytes(jpeg_bytes())
    (folder / "photos" / "a.txt").write_bytes(b"0 0.5 0.5 0.2 0.2\n")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="none of the 1 label file or label found"):
        call_command(
            "dataset_import", str(folder), workspace="acme", name="Beside", stdout=out, stderr=err
        )
    assert json.loads(out.getvalue())["report"]["labels_imported"] == 0
    said = err.getvalue()
    assert "Warning: Images were imported, but none" in said
    assert "Not imported:\n  Label files not read: 1\n" in said


def test_a_deleted_datasets_import_reports_are_collected_with_its_blobs(team, tmp_path):
    from django.core.files.storage import default_storage

    from datasets.models import Dataset
    from datasets.services.import_report import report_key
    from datasets.tasks import blobs_collect_garbage_task

    kept = _import(team, {"k.jpg": jpeg_bytes(color=(31, 41, 59))}, tmp_path, name="KeptReports")
    gone = _import(team, {"g.jpg": jpeg_bytes(color=(26, 53, 58))}, tmp_path, name="GoneReports")
    assert default_storage.exists(report_key(kept.pk))
    assert default_storage.exists(report_key(gone.pk))
    Dataset.objects.filter(pk=gone.dataset_id).delete()

    assert blobs_collect_garbage_task() >= 2  # the dataset's blob and its import's report
    assert not default_storage.exists(report_key(gone.pk))
    assert default_storage.exists(report_key(kept.pk))
