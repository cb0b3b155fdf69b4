from django.urls import path

from datasets.views import datasets, gallery, health, uploads, versions

W = "w/<slug:ws_slug>/"
D = W + "datasets/<int:pk>/"
urlpatterns = [
    # datasets
    path(W + "datasets/", datasets.dataset_list, name="dataset_list"),
    path(W + "datasets/new/", datasets.dataset_create, name="dataset_create"),
    path(D, datasets.dataset_detail, name="dataset_detail"),
    path(D + "edit/", datasets.dataset_edit, name="dataset_edit"),
    path(D + "delete/", datasets.dataset_delete, name="dataset_delete"),
    path(D + "semantic/", datasets.dataset_semantic_convert, name="dataset_semantic_convert"),
    # uploads
    path(D + "upload/", uploads.upload_page, name="upload_page"),
    path(D + "uploads/", uploads.upload_create, name="upload_create"),
    path(W + "imports/<int:import_pk>/", uploads.import_detail, name="import_detail"),
    path(
        W + "imports/<int:import_pk>/report.json",
        uploads.import_report_download,
        name="import_report_download",
    ),
    path(W + "imports/<int:import_pk>/upload/", uploads.upload_status, name="upload_status"),
    path(
        W + "imports/<int:import_pk>/files/<int:file_index>/chunks/<int:chunk_index>/",
        uploads.upload_chunk,
        name="upload_chunk",
    ),
    path(W + "imports/<int:import_pk>/complete/", uploads.upload_complete, name="upload_complete"),
    # gallery
    path(D + "images/", gallery.dataset_gallery, name="dataset_gallery"),
    path(D + "images/bulk/", gallery.images_bulk, name="dataset_images_bulk"),
    path(D + "images/<int:image_pk>/", gallery.image_detail, name="dataset_image_detail"),
    path(D + "images/<int:image_pk>/file/", gallery.image_file, name="dataset_image_file"),
    path(D + "images/<int:image_pk>/thumb/", gallery.image_thumb, name="dataset_image_thumb"),
    path(D + "images/<int:image_pk>/overlay/", gallery.image_overlay, name="dataset_image_overlay"),
    path(D + "split/", gallery.dataset_split_auto, name="dataset_split_auto"),
    path(D + "classes/", gallery.dataset_classes, name="dataset_classes"),
    path(D + "classes/add/", gallery.dataset_class_add, name="dataset_class_add"),
    path(
        D + "classes/<int:class_pk>/rename/",
        gallery.dataset_class_rename,
        name="dataset_class_rename",
    ),
    path(D + "classes/merge/", gallery.dataset_class_merge, name="dataset_class_merge"),
    path(
        D + "classes/<int:class_pk>/delete/",
        gallery.dataset_class_delete,
        name="dataset_class_delete",
    ),
    path(
        "explore/datasets/<int:pk>/images/<int:image_pk>/file/",
        gallery.public_image_file,
        name="public_image_file",
    ),
    path(
        "explore/datasets/<int:pk>/images/<int:image_pk>/thumb/",
        gallery.public_image_thumb,
        name="public_image_thumb",
    ),
    # health
    path(D + "health/", health.dataset_health, name="dataset_health"),
    path(D + "health/run/", health.dataset_health_run, name="dataset_health_run"),
    path(D + "stats/", health.dataset_stats, name="dataset_stats"),
    path(
        W + "settings/dataset-health/",
        health.workspace_dataset_health_policy,
        name="workspace_dataset_health_policy",
    ),
    # versions
    path(D + "versions/", versions.version_list, name="version_list"),
    path(D + "versions/new/", versions.version_create, name="version_create"),
    path(D + "versions/<int:number>/", versions.version_detail, name="version_detail"),
    path(
        D + "versions/<int:number>/export/<slug:fmt>/",
        versions.version_export,
        name="version_export",
    ),
    path(D + "export/<slug:fmt>/", versions.dataset_export, name="dataset_export"),
    path(D + "clone/", versions.dataset_clone_view, name="dataset_clone"),
    path("explore/", versions.explore, name="explore"),
    path("explore/<int:pk>/", versions.public_dataset, name="public_dataset"),
    path("explore/<int:pk>/clone/", versions.public_dataset_clone, name="public_dataset_clone"),
]
