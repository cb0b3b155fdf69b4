import io
import zipfile

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from core.errors import ServiceError
from training.models import TrainedModel
from training.services.models import model_upload
from training.weights_check import UnsafeWeights, pickle_globals, weights_check
from workspaces.selectors import workspace_access_for_user

pytestmark = pytest.mark.django_db


def _zip(pickled: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("archive/data.pkl", pickled)
    return out.getvalue()


def test_uploaded_weights_are_stored_not_loaded(team, project):
    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    data = _zip(b"\x80\x04N.")
    model = model_upload(
        access=access,
        project=project,
        name="",
        task="detect",
        upload=SimpleUploadedFile("my<b>.pt", data),
    )
    assert model.name == "my<b>.pt" and model.architecture == "uploaded"
    with default_storage.open(model.weights_key, "rb") as f:
        assert f.read() == data


@pytest.mark.parametrize(
    ("name", "data", "match"),
    [
        ("model.onnx", b"PK\x03\x04", "not a .pt file"),
        ("model.pt", b"\x80\x02}q\x00.", "not a PyTorch checkpoint"),
        ("model.pt", b"<html>", "not a PyTorch checkpoint"),
    ],
)
def test_bad_uploads_are_refused(team, project, name, data, match):
    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    with pytest.raises(ServiceError, match=match):
        model_upload(
            access=access,
            project=project,
            name="x",
            task="detect",
            upload=SimpleUploadedFile(name, data),
        )
    assert not TrainedModel.objects.exists()


def test_the_pickle_reader_sees_every_import_without_running_it(tmp_path):
    import collections
    import pickle

    from annotation.assist import _ultralytics_env

    _ultralytics_env()  # the check imports Ultralytics' classes: offline, restricted
    found = pickle_globals(pickle.dumps(collections.OrderedDict(a=1), protocol=4))
    assert ("collections", "OrderedDict") in found
    path = tmp_path / "evil.pt"
    path.write_bytes(_zip(pickle.dumps(print, protocol=2)))  # named as torch reads it
    with pytest.raises(UnsafeWeights, match=r"would call builtins\.print when loaded"):
        weights_check(path)
    path.write_bytes(_zip(pickle.dumps(print, protocol=4)))  # a pickle torch cannot read
    with pytest.raises(UnsafeWeights, match=r"would call builtins\.print when loaded"):
        weights_check(path)


def test_weights_are_uploaded_from_the_project_page(client, team, project):
    client.force_login(team.editor)
    page = client.get(f"/w/acme/projects/{project.pk}/").content.decode()
    assert 'data-testid="model-upload"' in page
    url = f"/w/acme/projects/{project.pk}/models/upload/"
    bad = SimpleUploadedFile("notes.pt", b"<html>")
    response = client.post(url, {"weights": bad, "name": "x", "task": "detect"}, follow=True)
    assert "not a PyTorch checkpoint" in response.content.decode()
    good = SimpleUploadedFile("mine.pt", _zip(b"\x80\x04N."))
    response = client.post(url, {"weights": good, "name": "From home", "task": "segment"})
    model = TrainedModel.objects.get()
    assert response["Location"] == f"/w/acme/models/{model.pk}/"
    assert (model.name, model.task, model.project) == ("From home", "segment", project)
    client.force_login(team.viewer)
    assert (
        'data-testid="model-upload"'
        not in client.get(f"/w/acme/projects/{project.pk}/").content.decode()
    )
    assert client.post(url, {"weights": SimpleUploadedFile("a.pt", b"PK")}).status_code == 403
