"""A person's notification settings (/settings/notifications/)."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
