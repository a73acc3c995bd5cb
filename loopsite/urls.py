"""Loop's URLs: the chat, the logins, and the operators' admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("accounts/", include("accounts.urls")),
    path("admin/", admin.site.urls),
    path("", include("chat.urls")),
]
