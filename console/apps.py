from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operators' console: the admin pages of runs, tool calls, breaker trips and memories.
    It sits above agent, tools and memory, and only reads them (bar Cancel, Continue and Forget).
    Listed ahead of django.contrib.admin, so its admin templates are the ones used."""

    name = "console"
    verbose_name = "Operators' console"
