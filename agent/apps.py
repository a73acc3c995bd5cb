from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        from agent import checks  # noqa: F401 (registers the model settings' checks)
