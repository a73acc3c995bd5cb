from django.apps import AppConfig


class SharingConfig(AppConfig):
    name = "sharing"
    verbose_name = "Shared conversations"
    default_auto_field = "django.db.models.BigAutoField"
