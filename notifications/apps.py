from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from agent.observers import observe
        from notifications.hearing import heard

        observe(heard)
