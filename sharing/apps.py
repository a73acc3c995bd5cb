from django.apps import AppConfig


class SharingConfig(AppConfig):
    name = "sharing"
    verbose_name = "Shared conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sharing import signals  # noqa: F401 (its receivers connect as it is imported)
