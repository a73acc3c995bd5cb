"""The Prometheus endpoint (/metrics)."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
