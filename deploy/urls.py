from deploy import views, views_exports, views_models, views_public

urlpatterns = [
    *views_models.urlpatterns,
    *views_exports.urlpatterns,
    *views_public.urlpatterns,
    *views.urlpatterns,
]
