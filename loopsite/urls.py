"""Loop's URLs: the chat with its Files and Memories, the logins, a person's own data and
settings, and the operators' admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("accounts/", include("accounts.urls")),
    path("", include("metrics.urls")),  # /metrics, for Prometheus (off unless configured)
    path("api/v1/", include(("api.urls", "api"), namespace="api")),
    path("v1/", include(("api.openai_urls", "openai"), namespace="openai")),  # OpenAI's paths
    path("admin/agent/", include("approvals.urls")),  # approvals' pages, once agent's
    path("admin/", admin.site.urls),
    path("files/", include("workspace.urls")),
    path("memories/", include("chat.memories_urls")),
    path("settings/tools/", include("mcp_servers.urls")),
    path("settings/keys/", include("api.page_urls")),
    path("settings/notifications/", include("notifications.urls")),
    path("settings/", include("accounts.settings_urls")),
    # >>> organisation urls (identity: /oidc/…; assistants: /assistants/…; sharing: /shared/…)
    path("oidc/", include("identity.urls")),  # empty unless LOOP_OIDC_ISSUER is set
    path("shared/", include("sharing.urls")),
    path("settings/shared-links/", include("sharing.settings_urls")),
    path("assistants/", include("chat.assistants_urls")),
    # <<< organisation urls
    path("", include("chat.urls")),
]

handler400 = "loopsite.errors.bad_request"
