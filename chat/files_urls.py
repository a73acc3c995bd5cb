"""The Files panel's URLs: /files/ (the workspace), /files/upload/, /files/raw/<path>, and the
changes, each a POST under /files/."""

from django.urls import path

from chat import files

urlpatterns = [
    path("", files.files, name="files"),
    path("upload/", files.upload, name="files_upload"),
    path("raw/<path:path>", files.raw, name="files_raw"),
    path("view/<path:path>", files.view, name="files_view"),
    path("delete/", files.delete, name="files_delete"),
]
