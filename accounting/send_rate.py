"""The per-person send rate: how many messages a person may send a minute
(LOOP_SEND_RATE_PER_MINUTE; 0: no limit). Counted in the database, one row per person and
minute, by one atomic statement, so every web process counts into the same row."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from accounting.models import SentInMinute

MINUTE = timedelta(minutes=1)
# A person's rows older than this are let go of as they send again (only the current one counts).
KEPT = timedelta(hours=1)
TABLE = SentInMinute._meta.db_table
# One statement: the person's old minutes let go of, this minute's count moved on and read.
COUNT = f"""
WITH gone AS (DELETE FROM {TABLE} WHERE user_id = %s AND minute < %s)
INSERT INTO {TABLE} (user_id, minute, count) VALUES (%s, %s, 1)
ON CONFLICT (user_id, minute) DO UPDATE SET count = {TABLE}.count + 1
RETURNING count
"""  # noqa: S608 (a table name of ours, no input)


@dataclass(frozen=True)
class TooFast:
    """A send refused: the rate, and when the person may send again."""

    per_minute: int
    again_at: datetime

    def retry_after(self, now: datetime | None = None) -> int:
        left = (self.again_at - (now or timezone.now())).total_seconds()
        return max(int(left) + (left % 1 > 0), 1)

    def in_words(self) -> str:
        return (
            f"You are sending faster than {self.per_minute} messages a minute, the most Loop "
            f"takes from one person. Wait {self.retry_after()} seconds, then send it again."
        )


def count_send(user_id: int, now: datetime | None = None) -> TooFast | None:
    """Count one message of the person's; TooFast (and it is not taken) past the rate."""
    per_minute = settings.LOOP_SEND_RATE_PER_MINUTE
    if per_minute <= 0:
        return None
    now = now or timezone.now()
    minute = now.replace(second=0, microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute(COUNT, [user_id, now - KEPT, user_id, minute])
        (count,) = cursor.fetchone()
    if count <= per_minute:
        return None
    return TooFast(per_minute, minute + MINUTE)
