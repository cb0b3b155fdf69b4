"""Starting an evaluation: what is refused at submit, with its reason and nothing written, and
who may start one. No model is loaded here (submitting reads rows and the version summary)."""

import re
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.test import Client
from django.utils import timezone

from core.errors import ServiceError
from core.leases import long_jobs_reap
from evaluations.models import Evaluation, EvaluationState
from evaluations.services.submit import IGNORE, evaluation_submit
from evaluations.tasks import evaluation_run
from tests.evaluations.conftest import version_with
from tests.training.factories import trained_model_row
from training.models import InspectState
from workspaces.models import Membership
from workspaces.selectors import workspace_access_for_user

pytestmark = pytest.mark.django_db
CSRF = re.compile(rb"[A-Za-z0-9]{64}")  # a masked token, in the page's headers and forms


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def model(team):
    return trained_model_row(workspace=team.workspace, class_names=["person", "car"])


def test_a_version_of_another_task_is_refused_with_the_reason(team, model):
    access = team.access("editor")
    masks = version_with(access=access, classes=["person", "car"], task="segment", name="Masks")
    with pytest.raises(ServiceError, match="is a detect model and Masks is a segment dataset"):
        evaluation_submit(access=access, model=model, version=masks)
    # The form says so too, and nothing is queued.
    response = _client(team.editor).get(f"/w/acme/models/{model.pk}/evaluate/?version={masks.pk}")
    assert response.status_code == 200
    assert "is a segment dataset" in response.content.decode()
    assert 'data-testid="evaluate-form"' not in response.content.decode()
    assert not Evaluation.objects.exists()


def test_uninspected_uploads_are_refused(team):
    access = team.access("editor")
    pending = trained_model_row(workspace=team.workspace, class_names=["person", "car"])
    pending.inspect_state = InspectState.PENDING
    pending.save(update_fields=["inspect_state"])
    street = version_with(access=access, classes=["person", "car"])
    with pytest.raises(ServiceError, match="still being inspected"):
        evaluation_submit(access=access, model=pending, version=street)
    assert not Evaluation.objects.exists()


def test_classes_that_cannot_be_paired_are_refused_with_their_names(team, model):
    access = team.access("editor")
    version = version_with(access=access, classes=["person", "truck", "bus"])
    cases = [
        (None, "“car” of the model has no class of the same name in Street v1"),
        (["person", ""], "“car” of the model has no counterpart chosen"),
        (["person", "plane"], "“plane” is not a class of Street v1"),
        (["truck", "truck"], "“truck” of Street v1 is paired with more than one class"),
        ([IGNORE, IGNORE], "No class of the model is paired"),
        (["person"], "Pair every class of the model"),
    ]
    for chosen, reason in cases:
        with pytest.raises(ServiceError, match=reason):
            evaluation_submit(access=access, model=model, version=version, class_map=chosen)
    # Posted by the form: the reason on the page (400), nothing queued.
    response = _client(team.editor).post(
        f"/w/acme/models/{model.pk}/evaluate/",
        {"version": version.pk, "split": "val", "class_0": "person", "class_1": ""},
    )
    assert response.status_code == 400
    assert "“car” of the model has no counterpart chosen" in response.content.decode()
    assert not Evaluation.objects.exists()


def test_mapped_and_ignored_classes_are_kept_and_the_job_queued(team, model):
    version = version_with(access=team.access("editor"), classes=["Person", "truck"])
    # "Person" is "person" up to case: the form proposes it; "car" the editor maps to "truck".
    page = _client(team.editor).get(f"/w/acme/models/{model.pk}/evaluate/?version={version.pk}")
    assert '<option value="Person" selected>' in page.content.decode()
    response = _client(team.editor).post(
        f"/w/acme/models/{model.pk}/evaluate/",
        {"version": version.pk, "split": "val", "class_0": "Person", "class_1": "truck"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    evaluation = Evaluation.objects.get()
    assert response["Location"] == f"/w/acme/evaluations/{evaluation.pk}/"
    assert evaluation.state == EvaluationState.QUEUED
    assert evaluation.class_map == [
        {"model": "person", "version": "Person"},
        {"model": "car", "version": "truck"},
    ]
    assert (evaluation.split, evaluation.imgsz, evaluation.task) == ("val", 64, "detect")
    # On another split, "ignore the rest" ignores what the editor left unpaired.
    response = _client(team.editor).post(
        f"/w/acme/models/{model.pk}/evaluate/",
        {"version": version.pk, "split": "train", "class_0": "Person", "ignore_rest": "1"},
    )
    assert response.status_code == 302
    ignoring = Evaluation.objects.get(split="train")
    assert ignoring.class_map[1] == {"model": "car", "version": None}
    assert ignoring.ignored_classes == ["car"]
    # A second start of the same evaluation while the first is queued is refused.
    with pytest.raises(ServiceError, match="already being evaluated"):
        evaluation_submit(
            access=team.access("editor"),
            model=model,
            version=version,
            class_map=["Person", IGNORE],
        )


def test_a_split_without_images_is_refused(team, model):
    version = version_with(
        access=team.access("editor"), classes=["person", "car"], splits=("train", "val")
    )
    with pytest.raises(ServiceError, match="has no images in its test split"):
        evaluation_submit(access=team.access("editor"), model=model, version=version, split="test")


def test_another_workspaces_version_or_model_is_not_found(team, stranger, model):
    theirs = workspace_access_for_user(
        user=stranger, slug=Membership.objects.get(user=stranger).workspace.slug
    )
    foreign = version_with(access=theirs, classes=["person", "car"], name="Theirs")
    foreign_model = trained_model_row(workspace=theirs.workspace, class_names=["person", "car"])
    access = team.access("editor")
    with pytest.raises(Http404):
        evaluation_submit(access=access, model=model, version=foreign)
    with pytest.raises(Http404):
        evaluation_submit(access=access, model=foreign_model, version=foreign)
    editor = _client(team.editor)
    unknown = foreign.pk + foreign_model.pk + 1000
    answers = [
        editor.get(f"/w/acme/models/{model.pk}/evaluate/?version={foreign.pk}"),
        editor.get(f"/w/acme/models/{model.pk}/evaluate/?version={unknown}"),
        editor.post(f"/w/acme/models/{model.pk}/evaluate/", {"version": foreign.pk}),
        editor.post(f"/w/acme/models/{model.pk}/evaluate/", {"version": unknown}),
        editor.get(f"/w/acme/models/{foreign_model.pk}/evaluate/"),
        editor.get(f"/w/acme/models/{unknown}/evaluate/"),
    ]
    assert [a.status_code for a in answers] == [404] * 6
    # A foreign id reads as an unknown one (the page's CSRF tokens aside).
    assert len({CSRF.sub(b"", a.content) for a in answers[:4]}) == 1
    assert not Evaluation.objects.exists()


def test_viewers_see_but_do_not_start(team, model):
    version = version_with(access=team.access("editor"), classes=["person", "car"])
    with pytest.raises(PermissionDenied):
        evaluation_submit(access=team.access("viewer"), model=model, version=version)
    viewer = _client(team.viewer)
    page = viewer.get(f"/w/acme/models/{model.pk}/").content.decode()
    assert 'data-testid="model-evaluations"' in page
    assert 'data-testid="model-evaluate"' not in page
    editor_page = _client(team.editor).get(f"/w/acme/models/{model.pk}/").content.decode()
    assert f'href="/w/acme/models/{model.pk}/evaluate/" data-testid="model-evaluate"' in editor_page
    assert viewer.get(f"/w/acme/models/{model.pk}/evaluate/").status_code == 403


def test_an_evaluation_already_taken_or_gone_is_left_alone(team, model):
    version = version_with(access=team.access("editor"), classes=["person", "car"])
    evaluation = evaluation_submit(access=team.access("editor"), model=model, version=version)
    Evaluation.objects.filter(pk=evaluation.pk).update(
        state=EvaluationState.RUNNING, lease_owner="another-worker"
    )
    evaluation_run(evaluation.pk)  # a redelivered message
    evaluation.refresh_from_db()
    assert (evaluation.state, evaluation.lease_owner) == (EvaluationState.RUNNING, "another-worker")
    evaluation_run(10**9)  # deleted meanwhile


def test_an_evaluation_whose_worker_died_is_requeued_then_failed_with_a_reason(team, model):
    version = version_with(access=team.access("editor"), classes=["person", "car"])
    evaluation = evaluation_submit(access=team.access("editor"), model=model, version=version)
    stale = timezone.now() - timedelta(minutes=5)
    running = {"state": EvaluationState.RUNNING, "lease_owner": "dead", "lease_until": stale}
    Evaluation.objects.filter(pk=evaluation.pk).update(**running, attempts=1)
    assert long_jobs_reap()["evaluations.services.run.EVALUATION_JOB"] == 1
    evaluation.refresh_from_db()
    assert (evaluation.state, evaluation.lease_owner) == (EvaluationState.QUEUED, "")
    Evaluation.objects.filter(pk=evaluation.pk).update(**running, attempts=3)
    long_jobs_reap()
    evaluation.refresh_from_db()
    assert evaluation.state == EvaluationState.FAILED
    assert evaluation.error.startswith("The evaluation was interrupted 3 times")
    assert evaluation.metrics == {} and evaluation.worst_images == []


def test_a_queued_evaluation_polls_its_status_until_it_ends(team, model):
    version = version_with(access=team.access("editor"), classes=["person", "car"])
    evaluation = evaluation_submit(access=team.access("editor"), model=model, version=version)
    viewer = _client(team.viewer)
    page = viewer.get(f"/w/acme/evaluations/{evaluation.pk}/").content.decode()
    assert 'hx-trigger="every 2s"' in page and "<noscript>" in page
    assert 'data-testid="evaluation-metrics"' not in page
    poll = {"HX-Request": "true", "HX-Target": "evaluation-status"}
    status = viewer.get(f"/w/acme/evaluations/{evaluation.pk}/", headers=poll)
    assert status.content.decode().lstrip().startswith('<section class="card" id="evaluation')
    assert "HX-Refresh" not in status
    Evaluation.objects.filter(pk=evaluation.pk).update(
        state=EvaluationState.FAILED, error="The evaluation failed: it was a test."
    )
    status = viewer.get(f"/w/acme/evaluations/{evaluation.pk}/", headers=poll)
    assert status["HX-Refresh"] == "true"  # the rest of the page follows the end
    assert "it was a test" in status.content.decode()


def test_the_list_and_comparison_queries_do_not_grow_with_evaluations(
    team, django_assert_num_queries, django_assert_max_num_queries
):
    version = version_with(access=team.access("editor"), classes=["person"])

    def add(n: int) -> None:
        for i in range(n):
            model = trained_model_row(workspace=team.workspace, class_names=["person"])
            Evaluation.objects.create(
                workspace=team.workspace,
                project=model.project,
                model=model,
                dataset_version=version,
                task="detect",
                class_map=[{"model": "person", "version": "person"}],
                imgsz=64,
                state=EvaluationState.SUCCEEDED,
                finished_at=timezone.now(),
                metrics={"metrics/mAP50(B)": 0.1 * (i + 1), "metrics/recall(B)": 0.5},
            )

    add(2)
    viewer = _client(team.viewer)
    urls = ["/w/acme/evaluations/", f"/w/acme/evaluations/compare/?version={version.pk}"]
    counts = []
    for url in urls:
        with django_assert_max_num_queries(20) as two:
            viewer.get(url)
        counts.append(len(two.captured_queries))
    add(4)
    for url, count in zip(urls, counts, strict=True):
        with django_assert_num_queries(count):
            page = viewer.get(url).content.decode()
    assert page.count('data-testid="compare-row"') == 6
    # The best of each column is marked: mAP50's; recall is the same for all, so none.
    assert page.count('data-testid="best"') == 1
