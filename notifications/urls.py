"""A person's notification settings (/settings/notifications/)."""

from django.urls import URLPattern, path

from notifications import views

urlpatterns: list[URLPattern] = [
    path("", views.notification_settings, name="notification_settings"),
    path("webhooks/", views.add_endpoint, name="webhook_add"),
    path("webhooks/<int:endpoint_id>/secret/", views.renew_secret, name="webhook_secret"),
    path("webhooks/<int:endpoint_id>/test/", views.send_test, name="webhook_test"),
    path("webhooks/<int:endpoint_id>/delete/", views.delete_endpoint, name="webhook_delete"),
]
