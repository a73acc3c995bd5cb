"""/shared/: making a link (the chat header's dialog posts here) and the shared pages."""

from django.urls import path

from sharing import views

app_name = "sharing"
urlpatterns = [
    path("new/<int:conversation_id>/", views.share, name="share"),
    path("<str:token>/", views.shared, name="shared"),
    path("<str:token>/files/<path:path>", views.shared_file, name="file"),
]
