from deploy import views, views_exports, views_models

urlpatterns = [*views_models.urlpatterns, *views_exports.urlpatterns, *views.urlpatterns]
