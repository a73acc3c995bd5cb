"""The database is PostgreSQL with pgvector, embedded and shared by every process of the project."""

import subprocess
import sys

import pytest
from django.db import connection

from tests.conftest import PROJECT_DIR, child_environment

# Printed by a child process: which server it reached, and since when that server has been up.
SERVER_IDENTITY = """
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT current_setting('data_directory'), pg_postmaster_start_time()")
    print(*cursor.fetchone(), sep="|")
"""


def server_identity() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('data_directory'), pg_postmaster_start_time()")
        return "|".join(str(value) for value in cursor.fetchone())


def start_shell(code: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=PROJECT_DIR,
        env=child_environment(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> str:
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    return stdout.strip()


@pytest.mark.django_db
def test_database_is_postgresql_with_the_vector_extension():
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert cursor.fetchone() is not None
        cursor.execute("SELECT '[1, 0]'::vector <=> '[0, 1]'::vector")
        assert cursor.fetchone()[0] == pytest.approx(1.0)


@pytest.mark.django_db
def test_a_second_process_joins_the_running_server_without_restarting_it():
    before = server_identity()
    assert finish(start_shell(SERVER_IDENTITY)) == before
    assert server_identity() == before  # the child's exit did not stop the server


# As SERVER_IDENTITY, once every one of the processes started together has reached the server:
# each says it arrived, then waits for the others before it leaves. On a busy machine one Python
# may start seconds after the other; without the wait, the first could come and go (stopping the
# server as the last one out) before the second starts, and they would not be "together".
TOGETHER = """
import pathlib, time
from django.db import connection
arrived = pathlib.Path({arrived!r})
with connection.cursor() as cursor:
    cursor.execute("SELECT current_setting('data_directory'), pg_postmaster_start_time()")
    identity = cursor.fetchone()
    (arrived / str(id(cursor))).touch()
    deadline = time.monotonic() + 120
    while len(list(arrived.iterdir())) < {count} and time.monotonic() < deadline:
        time.sleep(0.05)
print(*identity, sep="|")
"""


def test_processes_starting_together_share_one_server_whose_data_survives_restarts(tmp_path):
    (tmp_path / "var").mkdir()
    (arrived := tmp_path / "arrived").mkdir()
    var = {"LOOP_VAR_DIR": str(tmp_path / "var")}
    together = TOGETHER.format(arrived=str(arrived), count=2)
    first, second = start_shell(together, **var), start_shell(together, **var)
    identities = {finish(first), finish(second)}
    assert len(identities) == 1
    assert not (
        tmp_path / "var" / "postgres" / "postmaster.pid"
    ).exists()  # the last one out stopped it

    write = "CREATE TABLE note (body text); INSERT INTO note VALUES ('kept')"
    read = "SELECT body FROM note"
    finish(
        start_shell(
            f"from django.db import connection; connection.cursor().execute({write!r})", **var
        )
    )
    stored = finish(
        start_shell(
            "from django.db import connection\n"
            f"with connection.cursor() as c: c.execute({read!r}); print(c.fetchone()[0])",
            **var,
        )
    )
    assert stored == "kept"


def test_a_new_embedded_server_allows_the_sessions_web_and_workers_need(tmp_path, settings):
    """Each process borrows from a pool of LOOP_DB_POOL_SIZE, and a worker has Procrastinate's
    six besides: `make run` twice over (two webs, two workers) fits, with room for commands."""
    from loopsite.embedded_postgres.server import MAX_CONNECTIONS

    show = (
        "from django.db import connection\n"
        "with connection.cursor() as c: c.execute('SHOW max_connections'); print(c.fetchone()[0])"
    )
    assert finish(start_shell(show, LOOP_VAR_DIR=str(tmp_path))) == str(MAX_CONNECTIONS)
    assert MAX_CONNECTIONS >= 2 * (2 * settings.LOOP_DB_POOL_SIZE + 6 + 1) + 10
