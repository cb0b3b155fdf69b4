from datasets.views import datasets, gallery, health, uploads, versions

urlpatterns = [
    *datasets.urlpatterns,
    *uploads.urlpatterns,
    *gallery.urlpatterns,
    *health.urlpatterns,
    *versions.urlpatterns,
]
