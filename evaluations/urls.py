from django.urls import path

from evaluations import views

W = "w/<slug:ws_slug>/"
urlpatterns = [
    path(W + "models/<int:pk>/evaluate/", views.model_evaluate, name="model_evaluate"),
    path(W + "evaluations/", views.evaluation_list, name="evaluation_list"),
    path(W + "evaluations/compare/", views.evaluation_compare, name="evaluation_compare"),
    path(W + "evaluations/<int:pk>/", views.evaluation_detail, name="evaluation_detail"),
]
