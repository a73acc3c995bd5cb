"""The API's pages for people, behind the login like every page: /settings/keys/, a person's
keys (the API itself, which takes keys and no login, is api/urls.py)."""

from django.urls import path

from api import pages

app_name = "api_pages"
urlpatterns = [
    path("", pages.keys, name="keys"),
    path("revoke/", pages.revoke_key, name="revoke"),
]
