"""The chat's pages: thin adapters over agent.services."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "chat/home.html")
