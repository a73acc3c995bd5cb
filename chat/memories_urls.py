"""The Memories page's URLs: /memories/ and the changes, each a POST under /memories/."""

from django.urls import path

from chat import memories

urlpatterns = [
    path("", memories.memories, name="memories"),
    path("forget/", memories.forget, name="memories_forget"),
    path("add/", memories.add, name="memories_add"),
    path("<int:memory_id>/edit/", memories.edit, name="memories_edit"),
]
