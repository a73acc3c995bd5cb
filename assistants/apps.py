from django.apps import AppConfig


class AssistantsConfig(AppConfig):
    name = "assistants"
    verbose_name = "Assistants"
    default_auto_field = "django.db.models.BigAutoField"
