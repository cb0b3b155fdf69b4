from django.urls import path

from deploy.views import collection, deployments, exports, models, public

W = "w/<slug:ws_slug>/"
D = W + "deployments/"
urlpatterns = [
    path(W + "models/", models.model_list, name="model_list"),
    path(W + "models/<int:pk>/try/", models.model_try, name="model_try"),
    path(W + "models/<int:pk>/delete/", models.model_delete_view, name="model_delete"),
    path(W + "models/<int:pk>/collection/", collection.model_collection, name="model_collection"),
    path(W + "models/<int:pk>/exports/", exports.model_exports, name="model_exports"),
    path(
        W + "models/<int:pk>/exports/start/", exports.model_export_start, name="model_export_start"
    ),
    path(W + "exports/<int:pk>/download/", exports.export_download, name="export_download"),
    path("explore/models/<int:pk>/try/", public.public_model_try, name="public_model_try"),
    path(D, deployments.deployment_list, name="deployment_list"),
    path(D + "new/", deployments.deployment_create, name="deployment_create"),
    path(D + "<int:pk>/", deployments.deployment_detail, name="deployment_detail"),
    path(D + "<int:pk>/start/", deployments.deployment_start, name="deployment_start"),
    path(D + "<int:pk>/stop/", deployments.deployment_stop, name="deployment_stop"),
    path(D + "<int:pk>/swap/", deployments.deployment_swap, name="deployment_swap"),
    path(D + "<int:pk>/delete/", deployments.deployment_delete, name="deployment_delete"),
    path(
        D + "<int:pk>/collection/",
        collection.deployment_collection,
        name="deployment_collection",
    ),
]
