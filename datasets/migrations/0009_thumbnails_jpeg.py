"""Thumbnails are JPEG now, at a new key: every blob's is made again when a page shows it (the
gallery and health pages ask the worker for missing ones); the old WebP files are deleted with
their blob by the garbage collection."""

from django.db import migrations


def thumbnails_remade(apps, schema_editor):
    Blob = apps.get_model("datasets", "Blob")
    Blob.objects.filter(has_thumbnail=True).update(has_thumbnail=False)


class Migration(migrations.Migration):
    dependencies = [("datasets", "0008_import_video_fps")]

    operations = [migrations.RunPython(thumbnails_remade, migrations.RunPython.noop)]
