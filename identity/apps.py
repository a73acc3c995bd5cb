from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "identity"
    verbose_name = "Sign-in through the identity provider"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from identity import checks  # noqa: F401 (registers the system checks)
