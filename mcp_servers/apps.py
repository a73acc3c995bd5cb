from django.apps import AppConfig


class McpServersConfig(AppConfig):
    name = "mcp_servers"
    verbose_name = "MCP servers"

    def ready(self) -> None:
        from mcp_servers import checks  # noqa: F401 (registers LOOP_MCP_SERVERS' check)
