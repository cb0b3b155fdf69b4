"""The importer's rule, the same for every format: a file that looks like labels (XML, JSON,
TXT, CSV) and gave none is in the report with the format it was taken for and why; images with
no label are said first, on the page and by the command. Each case is a file that almost
matches a format."""

import io

import pytest
from django.core.management import CommandError, call_command

from datasets.models import ImportStatus
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.datasets.test_ingest import _import


def _reasons(imp) -> dict[str, tuple[str, str]]:
    return {s["file"]: (s["kind"], s["reason"]) for s in imp.report["skipped"]}


CASES = [
    # An XML that is neither VOC's <annotation> nor CVAT's <annotations> export.
    (
        "boxes.xml",
        b"<dataset><item file='a.jpg'><box x='1' y='2'/></item></dataset>",
        "label_file",
        "taken for Pascal VOC, but its root element is <dataset>, not VOC's <annotation>",
    ),
    # CVAT's root with nothing CVAT writes under it: taken for VOC, and said why not.
    (
        "annotations.xml",
        b"<annotations><object><name>car</name></object></annotations>",
        "label_file",
        "taken for Pascal VOC, but its root element is <annotations>, not VOC's <annotation>",
    ),
    # JSON with "images" that is not a list: taken for COCO.
    (
        "instances.json",
        b'{"images": {"a.jpg": 1}, "annotations": []}',
        "label_file",
        "not a COCO file (no images list)",
    ),
    # JSON no format knows.
    (
        "labels.json",
        b'{"a.jpg": {"boxes": [[1, 2, 3, 4]]}}',
        "label_file",
        "not read: no format Kestrel reads matched the upload: a JSON object with keys a.jpg",
    ),
    # YOLO lines, but beside the image instead of in labels/.
    (
        "a.txt",
        b"0 0.5 0.5 0.2 0.2\n",
        "label_file",
        "not read: no format Kestrel reads matched the upload: its first line is "
        "'0 0.5 0.5 0.2 0.2' (YOLO label lines: Kestrel reads them from a labels/ folder "
        "beside images/, or with a data.yaml)",
    ),
    # A CSV with boxes in columns no format names.
    (
        "boxes.csv",
        b"file,xmin,ymin,xmax,ymax,class\na.jpg,1,2,3,4,car\n",
        "label_file",
        "not read: no format Kestrel reads matched the upload: its first line is "
        "'file,xmin,ymin,xmax,ymax,class'",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "body", "kind", "reason"), CASES, ids=[c[0] for c in CASES])
def test_an_almost_matching_label_file_is_named_with_its_reason(
    team, tmp_path, name, body, kind, reason
):
    files = {"a.jpg": jpeg_bytes(), name: body}
    dataset, imp = _import(team, zip_of(files, tmp_path / "x.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert _reasons(imp)[name] == (kind, reason)
    assert imp.report["images_imported"] == 1
    # Images in, no label out: said first.
    assert imp.report["labels_found"] >= 1
    assert imp.report["warning"].startswith("Images were imported, but none of the")


@pytest.mark.django_db
def test_an_empty_label_file_is_said_with_its_format(team, tmp_path):
    files = {
        "images/train/a.jpg": jpeg_bytes(),
        "images/train/b.jpg": jpeg_bytes(color=(1, 2, 3)),
        "labels/train/a.txt": b"0 0.5 0.5 0.2 0.2\n",
        "labels/train/b.txt": b"",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "x.zip"))
    assert _reasons(imp)["labels/train/b.txt"] == (
        "empty_label_file",
        "read as Ultralytics YOLO: it holds no label",
    )
    groups = {g["kind"]: g for g in imp.report["not_imported"]}
    assert groups["empty_label_file"]["title"] == "Label files with no labels"
    assert imp.report["warning"] == ""  # one label came: the empty file is information


@pytest.mark.django_db
def test_a_readme_is_not_taken_for_labels(team, tmp_path):
    files = {
        "export/data.yaml": b"names: ['cat']\n",
        "export/README.roboflow.txt": b"This dataset was exported via roboflow.com\n",
        "export/train/images/a.jpg": jpeg_bytes(),
        "export/train/labels/a.txt": b"0 0.5 0.5 0.2 0.2\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "x.zip"))
    assert _reasons(imp)["export/README.roboflow.txt"] == (
        "file",
        "not read: a text for people, not labels",
    )
    assert imp.report["labels_imported"] == 1


@pytest.mark.django_db
def test_images_only_are_said_first(team, tmp_path):
    files = {f"photos/{i}.jpg": jpeg_bytes(color=(40 * i, 0, 0)) for i in range(3)}
    dataset, imp = _import(team, zip_of(files, tmp_path / "p.zip"))
    assert imp.report["warning"] == (
        "No labels: the upload held no label file, so all 3 images are imported unlabelled."
    )


@pytest.mark.django_db
def test_the_command_leads_with_the_zero_and_fails(team, tmp_path):
    """The original report: a CVAT-like XML next to images, imported with 0 labels and exit 0."""
    folder = tmp_path / "export"
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "a.jpg").write_bytes(jpeg_bytes())
    (folder / "boxes.xml").write_bytes(b"<dataset><item/></dataset>")
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="none of the"):
        call_command(
            "dataset_import", str(folder), workspace="acme", name="Zero", stdout=out, stderr=err
        )
    first = err.getvalue().splitlines()[0]
    assert first.startswith("Warning: Images were imported, but none of the")
    assert "boxes.xml" in out.getvalue()
