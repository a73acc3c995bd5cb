"""The Assistants page's URLs: /assistants/ and its changes under it."""

from django.urls import path

from chat import assistants

urlpatterns = [
    path("", assistants.assistants, name="assistants"),
    path("new/", assistants.edit, name="assistants_new"),
    path("<int:assistant_id>/edit/", assistants.edit, name="assistants_edit"),
    path("<int:assistant_id>/archive/", assistants.archive, name="assistants_archive"),
]
