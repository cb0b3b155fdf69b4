"""ul:// resolution for stock `ultralytics` (issue 20): `GET /api/datasets/<owner>/<dataset>/export`
and `GET /api/models/<owner>/<project>/<model>/files`, the signed downloads they point at, and
the real client resolving, converting and loading them from a live server."""

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from django.test import Client

from datasets.models import Image, Label
from datasets.platform_export import LINES_PER_BLOCK
from datasets.services.versions import version_create, version_manifest_load
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)
from tests.platform_client import client_env
from tests.servers import app_server
from tests.training.factories import trained_model_row
from tests.training.helpers import SHARED, version_of
from training.models import InspectState
from workspaces.selectors import workspace_access_for_user
from workspaces.services.keys import api_key_create

ROOT = Path(__file__).resolve().parents[2]
COCO8 = SHARED / "coco8"


def _key(team, scopes=("read",), role="owner") -> str:
    _, raw = api_key_create(access=team.access(role), name="ultralytics", scopes=list(scopes))
    return raw


def _client(raw: str | None) -> Client:
    return Client(headers={"Authorization": f"Bearer {raw}"}) if raw else Client()


def _get(client: Client, url: str):
    response = client.get(url)
    assert response["Content-Type"].startswith(("application/json", "application/x-ndjson")), (
        response["Content-Type"]
    )
    return response


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _local(url: str) -> str:
    """The path and query of an absolute URL the server minted, for Django's client."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def _ndjson(client: Client, answer: dict) -> list[dict]:
    response = client.get(_local(answer["downloadUrl"]))
    assert response.status_code == 200, _body(response)[:300]
    return [json.loads(line) for line in _body(response).decode().splitlines()]


@pytest.fixture
def birds(team):
    """A two-class dataset of three stored images with one saved version."""
    dataset = DatasetFactory(workspace=team.workspace, name="Birds DS")
    kestrel = DatasetClassFactory(dataset=dataset, index=0, name="kestrel")
    hawk = DatasetClassFactory(dataset=dataset, index=1, name="hawk")
    for split, cls in (("train", kestrel), ("train", hawk), ("val", kestrel)):
        LabelFactory(image=ImageFactory(dataset=dataset, split=split), dataset_class=cls)
    version_create(access=team.access("owner"), dataset=dataset, note="first")
    return dataset


# --- the dataset export answer --------------------------------------------------------------


@pytest.mark.django_db
def test_export_answers_a_signed_ndjson_of_the_newest_version(team, birds):
    client = _client(_key(team))
    answer = _get(client, "/api/datasets/acme/birds-ds/export").json()
    assert answer["version"] == 1
    assert urlsplit(answer["downloadUrl"]).path.endswith(
        "/birds-ds-v1-" + answer["contentHash"][:12] + ".ndjson"
    )
    lines = _ndjson(Client(), answer)  # fetched with no credentials at all
    head, images = lines[0], lines[1:]
    assert head["type"] == "dataset" and head["task"] == "detect"
    assert head["class_names"] == {"0": "kestrel", "1": "hawk"}
    assert head["version"] == 1 and head["content_hash"] == answer["contentHash"]
    assert "path" not in head  # else the client would look for the images on its own disk
    assert sorted(r["split"] for r in images) == ["train", "train", "val"]
    classes = sorted(r["annotations"]["boxes"][0][0] for r in images)
    assert classes == [0, 0, 1]
    stored = {i.blob.sha256: i for i in Image.objects.filter(dataset=birds).select_related("blob")}
    for record in images:
        sha = urlsplit(record["url"]).path.split("/")[-2]
        assert record["file"] == f"{sha[:32]}.png"
        image = Client().get(_local(record["url"]))  # each image, no credentials either
        assert image.status_code == 200
        data = _body(image)
        assert hashlib.sha256(data).hexdigest() == sha and sha in stored


@pytest.mark.django_db
def test_export_follows_versions_and_v_picks_one(team, birds):
    client = _client(_key(team))
    first = _get(client, "/api/datasets/acme/birds-ds/export").json()
    label = Label.objects.filter(image__dataset=birds).first()
    label.data = [0.25, 0.25, 0.1, 0.1]
    label.save(update_fields=["data"])
    version_create(access=team.access("owner"), dataset=birds, note="moved a box")
    second = _get(client, "/api/datasets/acme/Birds-DS/export").json()
    assert second["version"] == 2 and second["contentHash"] != first["contentHash"]
    # A new version is a new file name: the client converts it again instead of reusing.
    assert urlsplit(second["downloadUrl"]).path != urlsplit(first["downloadUrl"]).path
    boxes = [r["annotations"]["boxes"][0][1:] for r in _ndjson(Client(), second)[1:]]
    assert [0.25, 0.25, 0.1, 0.1] in boxes
    again = _get(client, "/api/datasets/acme/birds-ds/export?v=1").json()
    assert again["version"] == 1 and again["contentHash"] == first["contentHash"]

    # The same version signed again: the same lines once the query strings are left out,
    # which is what the client hashes to find its converted copy.
    def unsigned(lines):
        return [
            {**r, "url": r["url"].split("?")[0]} if "url" in r and r["type"] == "image" else r
            for r in lines
        ]

    assert unsigned(_ndjson(Client(), again)) == unsigned(_ndjson(Client(), first))


@pytest.mark.django_db
def test_export_refusals_are_json_a_person_can_read(team, birds, stranger):
    client = _client(_key(team))
    response = _get(client, "/api/datasets/acme/birds-ds/export?v=7")
    assert response.status_code == 404 and "no version 7" in response.json()["error"]
    response = _get(client, "/api/datasets/acme/birds-ds/export?v=x")
    assert response.status_code == 400 and "version number" in response.json()["error"]
    DatasetFactory(workspace=team.workspace, name="Unsaved")
    response = _get(client, "/api/datasets/acme/unsaved/export")
    assert response.status_code == 422
    assert "no saved version" in response.json()["error"]
    # Unknown workspace, another team's workspace, unknown dataset: one 404, same words
    # but for the names typed.
    theirs = DatasetFactory(
        workspace=workspace_access_for_user(user=stranger, slug="elsewhere").workspace,
        name="Birds DS",
    )
    version_create(
        access=workspace_access_for_user(user=stranger, slug="elsewhere"), dataset=theirs
    )
    for owner, slug in (("nobody", "birds-ds"), ("elsewhere", "birds-ds"), ("acme", "nope")):
        response = _get(client, f"/api/datasets/{owner}/{slug}/export")
        assert response.status_code == 404, (owner, slug)
        assert response.json() == {
            "error": f"No dataset “{slug}” in workspace “{owner}” that this caller can read."
        }


@pytest.mark.django_db
def test_export_keys_and_scopes(team, birds):
    url = "/api/datasets/acme/birds-ds/export"
    assert _get(_client(_key(team, ["train"])), url).status_code == 200  # a key made to train
    refused = _get(_client(_key(team, ["predict", "write"])), url)
    assert refused.status_code == 403 and "read or train scope" in refused.json()["error"]
    # The scope is checked before the dataset is looked up: no probing names with it.
    assert (
        _get(_client(_key(team, ["predict"])), "/api/datasets/acme/nope/export").status_code == 403
    )
    not_a_key = _get(_client("ksk_000000000000_nothing"), url)
    assert not_a_key.status_code == 401 and "not valid" in not_a_key.json()["error"]
    assert _get(Client(headers={"Authorization": "Basic eDp5"}), url).status_code == 401
    assert _get(Client(), url).status_code == 401  # no key, no session
    session = Client()
    session.force_login(team.viewer)
    assert _get(session, url).status_code == 200


@pytest.mark.django_db
def test_a_key_of_a_creator_who_left_finds_nothing(team, birds):
    raw = _key(team, role="admin")
    team.workspace.memberships.filter(user=team.admin).delete()
    response = _get(_client(raw), "/api/datasets/acme/birds-ds/export")
    assert response.status_code == 404


@pytest.mark.django_db
def test_signed_urls_refuse_tampering_expiry_and_other_files(team, birds, settings):
    answer = _get(_client(_key(team)), "/api/datasets/acme/birds-ds/export").json()
    url = _local(answer["downloadUrl"])
    path, query = url.split("?")
    sig = parse_qs(query)["sig"][0]
    exp = parse_qs(query)["exp"][0]
    other = _ndjson(Client(), answer)[1]["url"]
    image_path, image_query = _local(other).split("?")
    cases = {
        "no signature": path,
        "signature changed": f"{path}?exp={exp}&sig={sig[:-1]}{'0' if sig[-1] != '0' else '1'}",
        "expiry moved": f"{path}?exp={int(exp) + 3600}&sig={sig}",
        "another file name": path.replace(".ndjson", "-2.ndjson") + f"?{query}",
        "the image's signature on the NDJSON": f"{path}?{image_query}",
        "the NDJSON's signature on the image": f"{image_path}?{query}",
        "another image": image_path.replace(image_path.split("/")[-2], "f" * 64).replace(
            image_path.split("/")[-1].split(".")[0], "f" * 32
        )
        + f"?{image_query}",
        "another version": path.replace(f"/{birds.versions.get().pk}/", "/999999/") + f"?{query}",
    }
    for what, bad in cases.items():
        response = Client().get(bad)
        assert response.status_code == 403, what
        assert "not valid" in response.json()["error"], what
    expired = f"{path}?exp={int(time.time()) - 1}"
    from core.signed_urls import _signer
    from datasets.platform_export import NDJSON_PURPOSE

    subject = "/".join(path.split("/")[-2:])
    expired += f"&sig={_signer(NDJSON_PURPOSE)(subject, int(time.time()) - 1)}"
    assert Client().get(expired).status_code == 403
    settings.SECRET_KEY = "another install"  # noqa: S105 - a URL of another install
    assert Client().get(url).status_code == 403


@pytest.mark.django_db
def test_the_ndjson_streams_in_blocks_and_reads_the_manifest_a_block_at_a_time(team):
    """More images than one block of lines: every image once, in blocks, through the same
    reader of the frozen manifest (the manifest is never loaded whole)."""
    dataset = DatasetFactory(workspace=team.workspace, name="Many")
    cls = DatasetClassFactory(dataset=dataset, index=0, name="dot")
    count = LINES_PER_BLOCK + 5
    for i in range(count):
        image = ImageFactory(dataset=dataset, split="val" if i % 10 == 0 else "train")
        LabelFactory(image=image, dataset_class=cls)
    version_create(access=team.access("owner"), dataset=dataset)
    answer = _get(_client(_key(team)), "/api/datasets/acme/many/export").json()
    response = Client().get(_local(answer["downloadUrl"]))
    blocks = list(response.streaming_content)
    assert len(blocks) == 3  # the dataset line, then blocks of LINES_PER_BLOCK images
    lines = b"".join(blocks).decode().splitlines()
    assert len(lines) == 1 + count
    sent = sorted(json.loads(line)["url"].split("?")[0].split("/")[-2] for line in lines[1:])
    shas = Image.objects.filter(dataset=dataset).values_list("blob__sha256", flat=True)
    assert sent == sorted(shas)  # every image once (copies of the same bytes included)


# --- the model files answer -------------------------------------------------------------------


@pytest.fixture
def weights_model(team):
    weights = b"PK\x03\x04 weights of a model"
    model = trained_model_row(workspace=team.workspace, class_names=["bird"], weights=weights)
    model.weights_sha256 = hashlib.sha256(weights).hexdigest()
    model.save(update_fields=["weights_sha256"])
    return model, weights


@pytest.mark.django_db
def test_model_files_answer_the_weights_signed(team, weights_model):
    model, weights = weights_model
    project = model.project.name.lower().replace(" ", "-")
    client = _client(_key(team))
    for ident in (str(model.pk), model.name, "model-of-" + project):
        response = _get(client, f"/api/models/acme/{project}/{ident}/files")
        assert response.status_code == 200, (ident, response.content)
        files = response.json()["files"]
        assert [f["name"] for f in files] == ["best.pt"] and files[0]["size"] == len(weights)
        url = files[0]["downloadUrl"]
        assert urlsplit(url).path.endswith(f"/best-{model.weights_sha256[:12]}.pt")
        download = Client().get(_local(url))
        assert download.status_code == 200 and _body(download) == weights
    # Others' signatures, or the weights replaced since signing: refused.
    path, query = _local(url).split("?")
    assert Client().get(path).status_code == 403
    assert (
        Client().get(path.replace(f"/{model.pk}/", f"/{model.pk + 1}/") + f"?{query}").status_code
        == 403
    )
    model.weights_sha256 = "0" * 64
    model.save(update_fields=["weights_sha256"])
    gone = Client().get(_local(url))
    assert gone.status_code == 404 and "resolve the model again" in gone.json()["error"]


@pytest.mark.django_db
def test_model_files_pick_the_newest_of_a_name_and_never_an_unchecked_upload(team, weights_model):
    model, _ = weights_model
    newer = trained_model_row(
        workspace=team.workspace, class_names=["bird"], weights=b"PK\x03\x04 v2"
    )
    newer.project = model.project
    newer.name = model.name
    newer.save(update_fields=["project", "name"])
    pending = trained_model_row(
        workspace=team.workspace, class_names=["bird"], weights=b"PK\x03\x04 v3"
    )
    pending.project, pending.name, pending.inspect_state = (
        model.project,
        model.name,
        InspectState.PENDING,
    )
    pending.save(update_fields=["project", "name", "inspect_state"])
    project = model.project.name.lower().replace(" ", "-")
    client = _client(_key(team))
    answer = _get(client, f"/api/models/acme/{project}/{model.name}/files").json()
    assert answer["modelId"] == newer.pk
    response = _get(client, f"/api/models/acme/{project}/{pending.pk}/files")
    assert response.status_code == 404


@pytest.mark.django_db
def test_model_files_refusals(team, weights_model, stranger):
    model, _ = weights_model
    project = model.project.name.lower().replace(" ", "-")
    client = _client(_key(team))
    theirs = trained_model_row(
        workspace=workspace_access_for_user(user=stranger, slug="elsewhere").workspace,
        class_names=["x"],
    )
    their_project = theirs.project.name.lower().replace(" ", "-")
    cases = [
        ("nobody", project, str(model.pk)),
        ("elsewhere", their_project, str(theirs.pk)),
        ("acme", their_project, str(theirs.pk)),  # their project's name is not ours
        ("acme", project, str(theirs.pk)),  # their model's id in our project
        ("acme", "no-project", "x"),
        ("acme", project, "no-model"),
    ]
    for owner, proj, ident in cases:
        response = _get(client, f"/api/models/{owner}/{proj}/{ident}/files")
        assert response.status_code == 404, (owner, proj, ident)
        assert response.json()["error"] == (
            f"No model “{ident}” in project “{proj}” of workspace “{owner}” for this caller."
        )
    refused = _get(_client(_key(team, ["predict"])), f"/api/models/acme/{project}/{model.pk}/files")
    assert refused.status_code == 403 and "scope" in refused.json()["error"]
    assert (
        _get(
            _client(_key(team, ["train"])), f"/api/models/acme/{project}/{model.pk}/files"
        ).status_code
        == 200
    )
    assert (
        _get(_client("ul_" + "0" * 40), f"/api/models/acme/{project}/{model.pk}/files").status_code
        == 401
    )


# --- the real client, against a live server --------------------------------------------------

CLIENT = r"""
import json
import sys
from pathlib import Path

# Resolution only: a run reported by the client is the webhooks' to test.
import ultralytics.utils.callbacks.platform as reporting

reporting.TESTS_RUNNING = True
from ultralytics import YOLO
from ultralytics.data.utils import convert_ndjson_to_yolo_if_needed
from ultralytics.utils.checks import check_file

what, *args = sys.argv[1:]
if what == "data":
    out = [str(convert_ndjson_to_yolo_if_needed(uri)) for uri in args]
elif what == "file":
    out = str(check_file(args[0]))
elif what == "build":
    YOLO("yolo11n.yaml").save(args[0])
    out = args[0]
elif what == "model":
    model = YOLO(args[0])
    out = {"task": model.task, "names": len(model.names), "path": str(model.ckpt_path)}
elif what == "train":
    model, data = args
    trainer = YOLO(model)
    trainer.train(data=data, epochs=1, imgsz=64, batch=4, device="cpu", amp=False, workers=0,
                  plots=False, project=str(Path("runs").resolve()), name="ul", exist_ok=True)
    out = {"best": str(trainer.trainer.best), "data": str(trainer.trainer.args.data)}
print("RESULT " + json.dumps(out))
"""


def _client_env(home: Path, url: str, key: str) -> dict:
    """A person's machine (tests.platform_client)."""
    return client_env(home / "config", ULTRALYTICS_PLATFORM_URL=url, ULTRALYTICS_API_KEY=key)


def _run(home: Path, env: dict, *args: str, timeout: int = 300):
    done = subprocess.run(  # noqa: S603 - the installed client, our own script
        [sys.executable, "-c", CLIENT, *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + done.stderr
    results = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    return done.returncode, (json.loads(results[-1][7:]) if results else None), output


@pytest.fixture
def coco8(team, transactional_db):
    """coco8 as Ultralytics ships it (four train and four val images), a Kestrel version."""
    return version_of(
        user=team.owner, workspace=team.workspace, folder=COCO8, task="detect", name="coco8"
    )


def _yolo_rows(folder: Path) -> list[list[float]]:
    rows = []
    for label in folder.glob("*.txt"):
        rows += [[float(v) for v in ln.split()] for ln in label.read_text().splitlines() if ln]
    return sorted(rows)


@pytest.mark.same_on_any_database(
    "the stock client's fetch is what is tested; the export it reads is written as in "
    "tests/datasets, which run on both"
)
def test_the_client_converts_a_kestrel_dataset_and_fetches_it_again_once_changed(
    team, coco8, tmp_path
):
    home = tmp_path / "machine"
    home.mkdir()
    with app_server() as url:
        env = _client_env(home, url, _key(team))
        # The owner as a person might type it: any case.
        code, out, log = _run(
            home, env, "data", "ul://Acme/datasets/coco8", "ul://acme/datasets/coco8"
        )
        assert code == 0, log[-3000:]
        first, again = (Path(p) for p in out)
        assert first == again  # the same version: converted once, then reused
        data = yaml.safe_load(first.read_text())
        assert data["names"] == dict(enumerate(version_manifest_load(coco8)["classes"]))
        assert data["version"] == 1 and data["content_hash"] == coco8.content_hash
        root = first.parent
        for split in ("train", "val"):
            images = sorted(p.name for p in (root / "images" / split).iterdir())
            assert len(images) == 4, images
            # The same boxes as coco8's own labels, class by class name.
            theirs = yaml.safe_load((COCO8 / "coco8.yaml").read_text())["names"]
            ours = {name: i for i, name in data["names"].items()}
            expected = sorted(
                [float(ours[theirs[int(r[0])]]), *r[1:]]
                for r in _yolo_rows(COCO8 / "labels" / split)
            )
            got = _yolo_rows(root / "labels" / split)
            assert len(got) == len(expected)
            for a, b in zip(got, expected, strict=True):
                assert a[0] == b[0] and a[1:] == pytest.approx(b[1:], abs=1e-6)
        # The bytes are the stored ones.
        shas = {hashlib.sha256(p.read_bytes()).hexdigest() for p in root.glob("images/*/*")}
        assert shas == set(
            Image.objects.filter(dataset=coco8.dataset).values_list("blob__sha256", flat=True)
        )

        # Asked again later: the copy is reused as it is, nothing downloaded or written.
        written = {p: p.stat().st_mtime_ns for p in root.glob("*/*/*")}
        code, out, log = _run(home, env, "data", "ul://acme/datasets/coco8")
        assert code == 0, log[-3000:]
        assert Path(out[0]) == first
        assert {p: p.stat().st_mtime_ns for p in root.glob("*/*/*")} == written

        # A new version: fetched and converted again, beside the old copy, which is untouched.
        label = Label.objects.filter(image__dataset=coco8.dataset).order_by("id").first()
        label.data = [0.5, 0.5, 0.25, 0.25]
        label.save(update_fields=["data"])
        version_create(access=team.access("owner"), dataset=coco8.dataset, note="a box moved")
        code, out, log = _run(home, env, "data", "ul://acme/datasets/coco8")
        assert code == 0, log[-3000:]
        second = Path(out[0])
        assert second != first and first.is_file()
        assert yaml.safe_load(second.read_text())["version"] == 2
        rows = _yolo_rows(second.parent / "labels" / "train") + _yolo_rows(
            second.parent / "labels" / "val"
        )
        assert any(r[1:] == pytest.approx([0.5, 0.5, 0.25, 0.25]) for r in rows)
        # Its images were not downloaded again: the client linked them from its pool of
        # content-addressed images (Kestrel's image URLs end in the sha256's first 32 digits).
        inodes = {p.stat().st_ino for p in root.glob("images/*/*")}
        assert {p.stat().st_ino for p in second.parent.glob("images/*/*")} == inodes

        # check_file itself (what `data=` resolves through): the NDJSON, named by its version.
        code, out, log = _run(home, env, "file", "ul://acme/datasets/coco8")
        assert code == 0, log[-3000:]
        assert (
            Path(out).name
            == f"coco8-v2-{coco8.dataset.versions.get(number=2).content_hash[:12]}.ndjson"
        )

        # Refusals reach the person with Kestrel's words.
        code, _, log = _run(home, env, "data", "ul://acme/datasets/nothing-here")
        assert code != 0 and "No dataset or model weights found on Platform" in log
        DatasetFactory(workspace=team.workspace, name="Unsaved")
        code, _, log = _run(home, env, "data", "ul://acme/datasets/unsaved")
        assert code != 0 and "has no saved version yet" in log
        code, _, log = _run(
            home,
            {**env, "ULTRALYTICS_API_KEY": _key(team, ["predict"])},
            "data",
            "ul://acme/datasets/coco8",
        )
        assert code != 0 and "PermissionError" in log and "read or train scope" in log


@pytest.mark.same_on_any_database(
    "the stock client's download and training are what is tested; the rows are read as elsewhere"
)
def test_the_client_loads_a_kestrel_model_and_trains_on_ul_data_and_weights(team, coco8, tmp_path):
    home = tmp_path / "machine"
    home.mkdir()
    env = _client_env(home, "http://127.0.0.1:9", _key(team))
    code, out, log = _run(home, env, "build", str(tmp_path / "yolo11n.pt"))
    assert code == 0, log[-3000:]
    weights = (tmp_path / "yolo11n.pt").read_bytes()
    model = trained_model_row(workspace=team.workspace, class_names=[], weights=weights)
    model.name, model.weights_sha256 = "run1", hashlib.sha256(weights).hexdigest()
    model.save(update_fields=["name", "weights_sha256"])
    project = model.project.name.lower().replace(" ", "-")
    with app_server() as url:
        env = _client_env(
            home, url, _key(team, ["train"])
        )  # the key "Train on your own machine" makes
        uri = f"ul://acme/{project}/run1"
        code, out, log = _run(home, env, "model", uri)
        assert code == 0, log[-3000:]
        assert out["task"] == "detect" and out["names"] == 80
        saved = Path(out["path"])
        # Kept where the client keeps a URI's download, under a name that changes with the weights.
        assert saved.parts[-4:] == ("acme", project, "run1", f"best-{model.weights_sha256[:12]}.pt")
        assert saved.read_bytes() == weights

        code, out, log = _run(home, env, "train", uri, "ul://acme/datasets/coco8", timeout=600)
        assert code == 0, log[-3000:]
        assert Path(out["best"]).is_file()
        assert out["data"].endswith("data.yaml") and "coco8-v1-" in out["data"]
