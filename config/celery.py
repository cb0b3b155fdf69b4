import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("kestrel")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# core is no Django app, so the line above does not look in it: core.tasks (the long-job reaper).
app.autodiscover_tasks(["core"])
