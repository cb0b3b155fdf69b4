from django.urls import path

from billing import views

urlpatterns = [
    path("w/<slug:ws_slug>/billing/", views.workspace_billing, name="workspace_billing"),
    path("w/<slug:ws_slug>/billing/topup/", views.topup_start_view, name="billing_topup"),
    path("w/<slug:ws_slug>/billing/topup/done/", views.topup_done, name="billing_topup_done"),
    path("billing/stripe/webhook", views.stripe_webhook, name="stripe_webhook"),
]
