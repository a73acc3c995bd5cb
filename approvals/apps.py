from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from agent.signals import stop_requested
        from approvals import checks  # noqa: F401 (registers the approval setting's check)
        from approvals.waiting import stop_waiting

        stop_requested.connect(stop_waiting, dispatch_uid="approvals.stop_waiting")
