"""Start-up check: can the configured embedder be built? Memory does not work without it."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured

from memory.embedders import get_embedder


@register("memory")
def embedder_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Building an embedder checks that its model is installed, without loading it."""
    try:
        get_embedder()
    except (ImportError, ImproperlyConfigured) as error:
        return [
            Error(
                f"The memory embedder LOOP_EMBEDDER={settings.LOOP_EMBEDDER!r} cannot be "
                f"built: {error}",
                hint="Install what it names, or set LOOP_EMBEDDER to another embedder and run "
                "`manage.py reembed`. Loop never falls back to another embedder on its own: "
                "vectors of two embedders do not compare.",
                id="memory.E001",
            )
        ]
    return []
