"""A person's Tools settings, mounted at /settings/tools/: their MCP servers and tools."""

from django.urls import path

from mcp_servers import views

urlpatterns = [
    path("", views.tools_settings, name="mcp_settings"),
    path("<int:server_id>/", views.server_settings, name="mcp_server"),
    path("<int:server_id>/check/", views.check_server, name="mcp_check"),
    path("<int:server_id>/delete/", views.delete_server, name="mcp_delete"),
    path("<int:server_id>/tools/", views.tool_choices, name="mcp_tools"),
    path("<int:server_id>/tools/<int:tool_id>/accept/", views.accept_tool, name="mcp_accept"),
    path("<int:server_id>/connect/", views.connect, name="mcp_connect"),
    path("<int:server_id>/disconnect/", views.disconnect, name="mcp_disconnect"),
    path("oauth/callback/", views.oauth_callback, name="mcp_oauth_callback"),
]
