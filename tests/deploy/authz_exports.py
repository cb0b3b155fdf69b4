"""Authorisation-matrix rows for exports on the model page (tests/test_authz_matrix.py).

@export_model is a detect model of the workspace; @export is a finished ONNX export of it with
its file stored. Starting an export needs the write permission; each caller let in queues one
(or is told one is already running): 302 back to the model page either way."""

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from deploy.models import ExportState, ModelExport
from tests.authz import Row, _ws
from tests.training.factories import trained_model_row

_MODEL = {"pk": "@export_model"}

ROUTES = [
    Row("model_exports", "get", "viewer", 200, _ws(**_MODEL)),
    Row("model_export_start", "post", "editor", 302, _ws(**_MODEL), {"format": "onnx"}),
    Row("export_download", "get", "viewer", 200, _ws(pk="@export")),
]


def exports_ctx(values: dict) -> dict:
    model = trained_model_row(workspace=values["team"].workspace, class_names=["bird"])
    export = ModelExport.objects.create(
        workspace=model.workspace, model=model, format="onnx", state=ExportState.SUCCEEDED
    )
    export.file_key = default_storage.save(
        f"exports/{model.pk}/{export.pk}/kestrel-model-{model.pk}.onnx", ContentFile(b"onnx")
    )
    export.file_size = 4
    export.progress = 100
    export.save(update_fields=["file_key", "file_size", "progress"])
    return {"export_model": model.pk, "export": export.pk}


CTX = [exports_ctx]
