"""Training pages: the form that starts a job, the live job page, the jobs list, a project's
runs compared side by side, the model page, and downloads of checkpoints, plots and weights."""

from django.urls import path

from training.views.compare import project_compare
from training.views.estimate import job_estimate
from training.views.jobs import (
    job_artifact,
    job_cancel_view,
    job_detail,
    job_list,
    job_log,
    job_resume_view,
    job_stop_view,
)
from training.views.models import (
    model_detail,
    model_promote_view,
    model_upload_view,
    model_weights,
)
from training.views.projects import project_detail
from training.views.start import job_create

W = "w/<slug:ws_slug>/"
JOB = W + "training/jobs/<int:pk>/"
urlpatterns = [
    path(W + "projects/<int:pk>/", project_detail, name="project_detail"),
    path(W + "projects/<int:pk>/train/", job_create, name="job_create"),
    path(W + "projects/<int:pk>/train/estimate/", job_estimate, name="job_estimate"),
    path(W + "projects/<int:pk>/compare/", project_compare, name="project_compare"),
    path(W + "training/", job_list, name="job_list"),
    path(JOB, job_detail, name="job_detail"),
    path(JOB + "stop/", job_stop_view, name="job_stop"),
    path(JOB + "cancel/", job_cancel_view, name="job_cancel"),
    path(JOB + "resume/", job_resume_view, name="job_resume"),
    path(JOB + "files/<str:name>", job_artifact, name="job_artifact"),
    path(JOB + "log.txt", job_log, name="job_log"),
    path(W + "models/<int:pk>/", model_detail, name="model_detail"),
    path(W + "models/<int:pk>/weights/", model_weights, name="model_weights"),
    path(W + "models/<int:pk>/promote/", model_promote_view, name="model_promote"),
    path(W + "projects/<int:pk>/models/upload/", model_upload_view, name="model_upload"),
]
