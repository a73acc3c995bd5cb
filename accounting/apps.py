from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"
    verbose_name = "Accounting"

    def ready(self) -> None:
        from accounting import checks, signals  # noqa: F401 (registers the checks and handlers)
