from django.urls import path

from training import live
from training.views import compare, estimate, jobs, models, own_machine, projects, recipes, start

W = "w/<slug:ws_slug>/"
JOB = W + "training/jobs/<int:pk>/"
urlpatterns = [
    path(W + "projects/<int:pk>/", projects.project_detail, name="project_detail"),
    path(W + "projects/<int:pk>/train/", start.job_create, name="job_create"),
    path(W + "projects/<int:pk>/train/estimate/", estimate.job_estimate, name="job_estimate"),
    path(
        W + "projects/<int:pk>/train/own-machine/",
        own_machine.job_own_machine,
        name="job_own_machine",
    ),
    path(W + "projects/<int:pk>/compare/", compare.project_compare, name="project_compare"),
    path(W + "training/", jobs.job_list, name="job_list"),
    path(W + "training/recipes/", recipes.recipe_list, name="recipe_list"),
    path(W + "training/recipes/<int:pk>/rename/", recipes.recipe_rename, name="recipe_rename"),
    path(W + "training/recipes/<int:pk>/delete/", recipes.recipe_delete, name="recipe_delete"),
    path(JOB, jobs.job_detail, name="job_detail"),
    path(JOB + "stop/", jobs.job_stop_view, name="job_stop"),
    path(JOB + "cancel/", jobs.job_cancel_view, name="job_cancel"),
    path(JOB + "resume/", jobs.job_resume_view, name="job_resume"),
    path(JOB + "files/<str:name>", jobs.job_artifact, name="job_artifact"),
    path(JOB + "log.txt", jobs.job_log, name="job_log"),
    # Server-sent events, served by an async view (training.live).
    path("w/<slug:ws_slug>/jobs/<int:pk>/events", live.job_events, name="job_events"),
    path(W + "models/<int:pk>/", models.model_detail, name="model_detail"),
    path(W + "models/<int:pk>/weights/", models.model_weights, name="model_weights"),
    path(W + "models/<int:pk>/promote/", models.model_promote_view, name="model_promote"),
    path(W + "projects/<int:pk>/models/upload/", models.model_upload_view, name="model_upload"),
]
