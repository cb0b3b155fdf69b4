"""Authorisation-matrix rows for evaluations (tests/test_authz_matrix.py).

@eval_model is a detect model of the workspace with one class, "bird"; @eval_version a version
of a "bird" dataset; @evaluation a finished evaluation of the one on the other. Starting one
needs the train permission (editors), seeing them the read permission."""

from django.utils import timezone

from evaluations.models import Evaluation, EvaluationState
from tests.authz import Row, _ws
from tests.evaluations.conftest import version_with
from tests.training.factories import trained_model_row

ROUTES = [
    Row("model_evaluate", "get", "editor", 200, _ws(pk="@eval_model")),
    Row(
        "model_evaluate",
        "post",
        "editor",
        302,
        _ws(pk="@eval_model"),
        {"version": "@eval_version", "split": "val", "class_0": "bird"},
    ),
    Row("evaluation_list", "get", "viewer", 200, _ws()),
    Row("evaluation_compare", "get", "viewer", 200, _ws(), {"version": "@eval_version"}),
    Row("evaluation_detail", "get", "viewer", 200, _ws(pk="@evaluation")),
]


def evaluations_ctx(values: dict) -> dict:
    team = values["team"]
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    version = version_with(access=team.access("owner"), classes=["bird"], name="Birds eval")
    evaluation = Evaluation.objects.create(
        workspace=team.workspace,
        project=model.project,
        model=model,
        dataset_version=version,
        task="detect",
        class_map=[{"model": "bird", "version": "bird"}],
        imgsz=64,
        state=EvaluationState.SUCCEEDED,
        finished_at=timezone.now(),
        metrics={"metrics/mAP50(B)": 0.5, "metrics/mAP50-95(B)": 0.25},
        confusion={"names": ["bird", "background"], "matrix": [[1, 0], [1, 0]]},
    )
    return {"eval_model": model.pk, "eval_version": version.pk, "evaluation": evaluation.pk}


CTX = [evaluations_ctx]
