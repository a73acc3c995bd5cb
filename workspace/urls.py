"""The Files panel's URLs: /files/ (the workspace), /files/upload/, /files/raw/<path>, previews
(/files/view/<path>, /files/image/<path>), and the changes, each a POST under /files/."""

from django.urls import path

from workspace import views

urlpatterns = [
    path("", views.files, name="files"),
    path("quota/", views.quota, name="files_quota"),
    path("upload/", views.upload, name="files_upload"),
    path("raw/<path:path>", views.raw, name="files_raw"),
    path("view/<path:path>", views.view, name="files_view"),
    path("image/<path:path>", views.image, name="files_image"),
    path("delete/", views.delete, name="files_delete"),
]
