"""The embedded PostgreSQL is sized to the machine's memory and cores, and an operator can say
otherwise: the rules as a pure function, then a server started on them reporting them."""

import pytest

from loopsite.embedded_postgres import server
from loopsite.embedded_postgres.server import MAX_CONNECTIONS, sizing
from tests.test_database import finish, start_shell

GB = 1024**3


def test_a_large_machine_gets_the_hnsw_build_its_memory_and_caps_on_the_rest():
    sized = sizing(64 * GB, 8, {})
    assert sized["shared_buffers"] == "8192MB"  # a quarter, capped at 8 GB
    assert sized["effective_cache_size"] == "49152MB"  # three quarters
    assert sized["maintenance_work_mem"] == "2048MB"  # the 1M-memory HNSW graph
    assert sized["autovacuum_work_mem"] == "512MB"
    assert sized["max_parallel_maintenance_workers"] == "4"


def test_this_kind_of_machine_is_sized_by_the_rules():
    sized = sizing(24 * GB, 2, {})
    assert sized["shared_buffers"] == "6144MB"
    assert sized["effective_cache_size"] == "18432MB"
    assert sized["maintenance_work_mem"] == "2048MB"
    assert sized["work_mem"] == f"{min(64, max(4, 24 * 1024 // (4 * MAX_CONNECTIONS)))}MB"
    assert sized["max_parallel_maintenance_workers"] == "1"  # the leader and one helper


def test_a_small_machine_keeps_an_index_build_to_an_eighth_of_its_memory():
    sized = sizing(2 * GB, 1, {})
    assert sized["shared_buffers"] == "512MB"
    assert sized["maintenance_work_mem"] == "256MB"
    # A quarter of the memory over the sessions, PostgreSQL's default (4MB) the floor.
    assert sized["work_mem"] == f"{max(4, 2 * 1024 // (4 * MAX_CONNECTIONS))}MB"
    assert sized["max_parallel_maintenance_workers"] == "0"


def test_a_tiny_machine_keeps_postgresqls_defaults_as_floors():
    sized = sizing(256 * 1024 * 1024, 1, {})
    assert sized["shared_buffers"] == "128MB"
    assert sized["maintenance_work_mem"] == "64MB"


def test_an_operator_sizes_for_the_share_of_the_machine_given_to_postgresql():
    sized = sizing(64 * GB, 8, {"LOOP_POSTGRES_MEMORY_MB": "4096", "LOOP_POSTGRES_CPUS": "2"})
    assert sized == sizing(4 * GB, 2, {})


def test_an_operator_setting_wins_over_its_rule_alone():
    sized = sizing(
        24 * GB,
        2,
        {
            "LOOP_POSTGRES_SHARED_BUFFERS": "1GB",
            "LOOP_POSTGRES_MAX_PARALLEL_MAINTENANCE_WORKERS": "0",
        },
    )
    assert sized["shared_buffers"] == "1GB"
    assert sized["max_parallel_maintenance_workers"] == "0"
    assert sized["maintenance_work_mem"] == sizing(24 * GB, 2, {})["maintenance_work_mem"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LOOP_POSTGRES_SHARED_BUFFERS", "lots"),
        ("LOOP_POSTGRES_WORK_MEM", "4MB'\nfsync = 'off"),  # no way into postgresql.conf
        ("LOOP_POSTGRES_MAX_PARALLEL_MAINTENANCE_WORKERS", "2GB"),
        ("LOOP_POSTGRES_MEMORY_MB", "4GB"),
    ],
)
def test_a_malformed_setting_stops_the_start_naming_it(variable, value):
    with pytest.raises(ValueError, match=variable):
        sizing(24 * GB, 2, {variable: value})


def test_the_machines_memory_and_cores_are_read():
    assert 256 * 1024 * 1024 < server.machine_memory() < 2**50
    assert server.machine_cpus() >= 1


def test_a_new_embedded_server_reports_its_sizing(tmp_path):
    expected = sizing(
        server.machine_memory(),
        server.machine_cpus(),
        {"LOOP_POSTGRES_MEMORY_MB": "3000", "LOOP_POSTGRES_WORK_MEM": "24MB"},
    )
    names = list(expected)
    show = (
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        f"    for name in {names!r}:\n"
        "        c.execute(f'SHOW {name}'); print(c.fetchone()[0])"
    )
    shown = finish(
        start_shell(
            show,
            LOOP_VAR_DIR=str(tmp_path),
            LOOP_POSTGRES_MEMORY_MB="3000",
            LOOP_POSTGRES_WORK_MEM="24MB",
        )
    ).splitlines()
    # PostgreSQL shows memory in its largest whole unit: 750MB, 2250MB, 24MB, 1.
    assert dict(zip(names, shown, strict=True)) == {
        name: _shown(value) for name, value in expected.items()
    }
    assert shown[names.index("work_mem")] == "24MB"


def _shown(value: str) -> str:
    if value.endswith("MB") and int(value[:-2]) % 1024 == 0:
        return f"{int(value[:-2]) // 1024}GB"
    return value
