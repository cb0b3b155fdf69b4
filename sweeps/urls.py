from django.urls import path

from sweeps import views

W = "w/<slug:ws_slug>/"
SWEEP = W + "sweeps/<int:pk>/"
urlpatterns = [
    path(W + "projects/<int:pk>/sweeps/", views.sweep_list, name="sweep_list"),
    path(W + "projects/<int:pk>/sweeps/new/", views.sweep_create, name="sweep_create"),
    path(SWEEP, views.sweep_detail, name="sweep_detail"),
    path(SWEEP + "stop/", views.sweep_stop_view, name="sweep_stop"),
    path(SWEEP + "resume/", views.sweep_resume_view, name="sweep_resume"),
    path(SWEEP + "promote/", views.sweep_promote_view, name="sweep_promote"),
    path(SWEEP + "recipe/", views.sweep_recipe_view, name="sweep_recipe"),
]
