"""The notifications' jobs as their callers defer them: on Django's connection, inside the
caller's transaction, whichever connector the Procrastinate app has (a worker's is a pool of its
own, which a run's thread must not use). notifications/tasks.py binds the jobs themselves."""

from procrastinate.contrib.django import app
from procrastinate.contrib.django.django_connector import DjangoConnector
from procrastinate.jobs import JobDeferrer
from procrastinate.manager import JobManager
from procrastinate.types import JSONValue

from agent.queue import NOTIFY_QUEUE

MAIL_RUN = "notifications.mail_run"
DELIVER_WEBHOOK = "notifications.deliver_webhook"


def defer(task_name: str, *, schedule_in: int | None = None, **arguments: JSONValue) -> int:
    """Queue the job `task_name(**arguments)`, `schedule_in` seconds from now if given."""
    later = None if schedule_in is None else {"seconds": schedule_in}
    template = app.configure_task(task_name, queue=NOTIFY_QUEUE, schedule_in=later).job
    return JobDeferrer(job_manager=JobManager(DjangoConnector()), job=template).defer(**arguments)


def defer_delivery(delivery_id: int, *, schedule_in: int | None = None) -> int:
    return defer(DELIVER_WEBHOOK, schedule_in=schedule_in, delivery_id=delivery_id)


def defer_mail(run_id: int, reason: str) -> int:
    return defer(MAIL_RUN, run_id=run_id, reason=reason)
