from django.apps import AppConfig


class EngineConfig(AppConfig):
    """What a worker does: claim runs, work them through the loop, supervise its processes. No
    models of its own: a run's records are agent's."""

    name = "engine"
    verbose_name = "Run engine"
