"""The Ultralytics Platform's webhooks, as the stock `ultralytics` client calls them (issue 20):
mounted at /api/webhooks/."""

urlpatterns: list = []
