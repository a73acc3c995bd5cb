from django.apps import AppConfig
from django.conf import settings


class MetricsConfig(AppConfig):
    name = "metrics"
    verbose_name = "Metrics"

    def ready(self) -> None:
        """With metrics on (LOOP_METRICS_TOKEN), this process counts runs' events in the site's
        metrics directory; off, it does not even listen, so runs pay nothing."""
        if not settings.LOOP_METRICS_TOKEN:
            return
        from agent.observers import observe
        from metrics.access import networks
        from metrics.multiprocess import count_in

        networks(tuple(settings.LOOP_METRICS_ALLOW))  # a wrong entry stops the site now
        count_in(settings.LOOP_METRICS_DIR)
        from metrics.heard import heard  # its series open their files in that directory

        observe(heard)
