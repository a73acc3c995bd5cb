from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from agent.recorder import write_request_rows
        from agent.signals import stop_requested
        from approvals import checks  # noqa: F401 (registers the approval setting's check)
        from approvals.models import request_row
        from approvals.waiting import stop_waiting

        stop_requested.connect(stop_waiting, dispatch_uid="approvals.stop_waiting")
        write_request_rows(request_row)
