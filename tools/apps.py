import logging

from django.apps import AppConfig
from django.conf import settings

logger = logging.getLogger("tools")


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = "Tools"

    def ready(self) -> None:
        from tools import checks  # noqa: F401 (registers the sandbox check)

        if settings.LOOP_SANDBOX == "subprocess":
            logger.warning(
                "LOOP_SANDBOX=subprocess: run_code will run snippets WITHOUT isolation "
                "(no namespaces, host filesystem visible). Use it only on a trusted machine."
            )
