"""The re-check of provider identities as a periodic job, in the recovery queue beside the other
housekeeping, so it runs even while every run slot is taken."""

import logging

from asgiref.sync import sync_to_async
from procrastinate.contrib.django import app

from agent.queue import RECOVERY_QUEUE
from identity.deprovisioning import Outcome, recheck_due

logger = logging.getLogger(__name__)


@app.periodic(cron="*/5 * * * *", periodic_id="recheck_identities")
@app.task(
    name="identity.recheck_identities", queue=RECOVERY_QUEUE, queueing_lock="recheck_identities"
)
async def recheck_identities(timestamp: int) -> int:
    """Every five minutes: the identities due (LOOP_OIDC_RECHECK_MINUTES) asked about; returns
    how many the provider no longer admits."""
    counts = await sync_to_async(recheck_due)()
    if any(counts.values()):
        logger.info("Identity re-check: %s", {key.value: n for key, n in counts.items()})
    return counts[Outcome.REMOVED]
