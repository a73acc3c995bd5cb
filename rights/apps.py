from django.apps import AppConfig


class RightsConfig(AppConfig):
    name = "rights"
    verbose_name = "Group rights"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rights import signals

        signals.connect()
