"""Settings → Shared links (/settings/shared-links/): a person's links, and Revoke."""

from django.urls import path

from sharing import views

urlpatterns = [
    path("", views.shared_links, name="shared_links"),
    path("revoke/", views.revoke, name="shared_link_revoke"),
]
