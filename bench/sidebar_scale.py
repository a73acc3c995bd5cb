"""The chat page with 5 conversations beside the same page with 5,000 (issue 40: "a person with
5,000 conversations gets the chat page in the same time as with 5").

    .venv/bin/python bench/sidebar_scale.py [--few 5] [--many 5000] [--repeats 21]

On a test database of its own (created and dropped) on the embedded PostgreSQL: two people, one
with --few conversations and one with --many, each conversation with one ended run (the sidebar
reads each one's last status), last used a minute apart, made with bulk_create. Each person's
chat page ("/") is requested through Django's test client, as a browser would (session,
middleware, templates); the figure is the median of --repeats requests after two to warm up,
with the number of queries the page made and its size; and the median CPU time of the process
(Django's part of it, which a busy machine disturbs less). The person with --few is the baseline;
the ratio is many / few. No floor in ms (the machine decides those); the ratio is what the issue
asks to be about 1.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopsite.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import AbstractBaseUser  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from agent.models import AgentRun, Conversation  # noqa: E402
from core.events import RunStatus  # noqa: E402

BATCH = 1000


def person_with(name: str, count: int) -> AbstractBaseUser:
    """A person with `count` conversations, each with one ended run, a minute apart by use."""
    person = get_user_model().objects.create_user(name)
    conversations = Conversation.objects.bulk_create(
        (Conversation(owner=person, title=f"Conversation {n}") for n in range(count)),
        batch_size=BATCH,
    )
    AgentRun.objects.bulk_create(
        (
            AgentRun(user=person, conversation=c, task=f"Task {c.pk}", status=RunStatus.SUCCEEDED)
            for c in conversations
        ),
        batch_size=BATCH,
    )
    now = timezone.now()
    with connection.cursor() as cursor:  # bulk_create stamps them all now: spread them out
        cursor.execute(
            "UPDATE agent_conversation SET updated_at = %s - (id * interval '1 minute') "
            "WHERE owner_id = %s",
            [now - timedelta(seconds=1), person.pk],
        )
    return person


def timed(person: AbstractBaseUser, repeats: int) -> tuple[float, float, int, int]:
    """The chat page's median time in ms (wall clock, and this process's CPU: steadier on a
    busy machine, and all of it but PostgreSQL's), its queries and its size in bytes."""
    client = Client()
    client.force_login(person)
    for _ in range(2):
        client.get("/")
    walls, cpus = [], []
    for _ in range(repeats):
        reset_queries()
        wall, cpu = time.perf_counter(), time.process_time()
        response = client.get("/")
        cpus.append((time.process_time() - cpu) * 1000)
        walls.append((time.perf_counter() - wall) * 1000)
        assert response.status_code == 200, response.status_code
    median = statistics.median
    return median(walls), median(cpus), len(connection.queries), len(response.content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--few", type=int, default=5)
    parser.add_argument("--many", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=21)
    options = parser.parse_args()
    setup_test_environment()  # lets the test client in (ALLOWED_HOSTS)
    connection.settings_dict["TEST"]["NAME"] = "loop_bench_sidebar"
    original = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        few = person_with("bench-few", options.few)
        many = person_with("bench-many", options.many)
        settings.DEBUG = True  # connection.queries is only kept when DEBUG is on
        rows = [(options.few, *timed(few, options.repeats))]
        rows.append((options.many, *timed(many, options.repeats)))
        print(f"the chat page, median of {options.repeats} requests (Django's test client)")
        print(f"{'conversations':>14}{'median':>11}{'CPU':>11}{'queries':>9}{'bytes':>10}")
        for count, wall, cpu, queries, size in rows:
            print(f"{count:>14,}{wall:>8.1f} ms{cpu:>8.1f} ms{queries:>9}{size:>10,}")
        wall_ratio, cpu_ratio = rows[1][1] / rows[0][1], rows[1][2] / rows[0][2]
        print(
            f"ratio {options.many:,} / {options.few:,}: {wall_ratio:.2f}x the time, "
            f"{cpu_ratio:.2f}x the CPU"
        )
    finally:
        connection.creation.destroy_test_db(original, verbosity=0)


if __name__ == "__main__":
    main()
