"""The notifications' jobs on Procrastinate, in the workers' "notify" queue (agent.queue): a run's
mail, and a webhook's delivery with its retries. Each runs in a thread of its own slot, so a slow
server holds neither a run nor the recovery."""

import logging

from django.db import connection
from procrastinate import RetryStrategy
from procrastinate.contrib.django import app

from agent.queue import NOTIFY_QUEUE
from notifications import mail, retention, webhooks
from notifications.models import Delivery, MailReason
from notifications.queue import DELIVER_WEBHOOK, MAIL_RUN, defer_delivery

logger = logging.getLogger(__name__)


@app.task(
    name=MAIL_RUN,
    queue=NOTIFY_QUEUE,
    # The SMTP server down a while: tried again, a minute apart, then given up (logged).
    retry=RetryStrategy(max_attempts=5, wait=60),
)
def mail_run(run_id: int, reason: str) -> bool:
    try:
        return mail.mail_run(run_id, MailReason(reason))
    finally:
        connection.close()


@app.task(name=DELIVER_WEBHOOK, queue=NOTIFY_QUEUE)
def deliver_webhook(delivery_id: int) -> str:
    """One attempt at the delivery; a failed one defers the next, later by the retry schedule
    (LOOP_WEBHOOK_RETRY_SECONDS), until one is delivered or none is left. Each attempt is a job
    of its own, so the log and the schedule survive any worker's restart."""
    try:
        return attempt(delivery_id)
    finally:
        connection.close()


def attempt(delivery_id: int) -> str:
    delivery = (
        Delivery.objects.select_related("endpoint")
        .filter(pk=delivery_id, state=Delivery.State.PENDING)
        .first()
    )
    if delivery is None:  # delivered, given up, or its endpoint deleted
        return "gone"
    logged = webhooks.attempt(delivery)
    if delivery.state == Delivery.State.PENDING:
        wait = webhooks.next_retry_seconds(logged.number)
        defer_delivery(delivery.pk, schedule_in=wait)
        logger.info(
            "Webhook %s: attempt %s failed (%s)", delivery.webhook_id, logged.number, logged.error
        )
    return delivery.state


@app.periodic(cron="47 * * * *", periodic_id="prune_notifications")
@app.task(name="notifications.prune", queue=NOTIFY_QUEUE, queueing_lock="prune_notifications")
def prune_notifications(timestamp: int) -> int:
    """Hourly: deliveries older than LOOP_KEEP_DELIVERIES_DAYS, and presences a day old
    (notifications/retention.py). Returns how many deliveries went."""
    try:
        return retention.prune().deliveries
    finally:
        connection.close()
