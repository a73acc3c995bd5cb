"""Loop's URLs. The chat page joins these with its own issue; for now operators have the admin."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
