"""The Prometheus endpoint (/metrics)."""

from django.urls import URLPattern, path

from metrics.views import scrape

urlpatterns: list[URLPattern] = [path("metrics", scrape, name="metrics")]
