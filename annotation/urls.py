from django.urls import path

from annotation import views

W = "w/<slug:ws_slug>/datasets/<int:pk>/"
urlpatterns = [
    path(W + "images/<int:image_pk>/annotate/", views.image_annotate, name="image_annotate"),
    path(W + "labelling/", views.dataset_labelling, name="dataset_labelling"),
    path(W + "labelling/prelabel/", views.prelabel_start, name="prelabel_start"),
    path(W + "review/", views.review_queue, name="review_queue"),
    path(W + "least-confident/", views.uncertain_queue, name="uncertain_queue"),
]
