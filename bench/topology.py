"""How fast a run's events reach the page when the worker, the web server, Redis, PostgreSQL and
the person are on different hosts, beside the same parts all on one host, in the same run.

    .venv/bin/python bench/topology.py [--runs 10] [--latency-ms 200]

Needs root (network namespaces: tests/topology/hosts.py). Builds the several-host site (PostgreSQL
with pgvector, Redis, daphne on web hosts A and B, workers on D and E, the person on a client
host), and beside it the same parts on one host: on the PostgreSQL host, a Redis, a daphne and a
worker, all on 127.0.0.1, using a database of their own on that same server (so neither site's
worker takes the other's runs). Then, --runs times, one run after the other and alternating so
that both settings see the same load on the machine:

1. across hosts: the person, on the client host, logs in on A and sends the demo task, and
   watches the run on a socket to A and one to B (tests/topology/client.py);
2. on one host: the person, on the PostgreSQL host too, does the same with two sockets to its
   daphne.

For every frame a socket receives, each event it newly covers (its seq marker says up to which)
counts once: latency is the frame's arrival minus the event's `created_at`, stamped by the worker
just before its INSERT (every host shares this machine's clock), for the events stored after the
socket's first frame (those before it were read back from the log when it connected). Printed:
p50, p99 and max per setting, and how many events the pages saw against the log (all must be).
"""

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import DEMO_TASK, percentile
from tests.topology import hosts

SOLO_REDIS_PORT, SOLO_WEB_PORT, SOLO_DATABASE = 6380, 8001, "loop_solo"


@dataclass
class Seen:
    """What the pages of one setting saw."""

    name: str
    latencies: list[float] = field(default_factory=list)  # seconds, per live event per socket
    slowest: list[tuple[float, str, str]] = field(default_factory=list)  # latency, kind, web
    events_seen: int = 0
    events_logged: int = 0
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        ms = [1000 * value for value in self.latencies]
        return (
            f"{self.name:<14} events {self.events_seen}/{self.events_logged} seen, "
            f"{len(ms)} live:"
            f"p50 {percentile(ms, 0.5):6.1f} ms  p99 {percentile(ms, 0.99):6.1f} ms  "
            f"max {max(ms, default=float('nan')):6.1f} ms  reconnects {self.reconnects}"
            + (f"  errors {self.errors}" if self.errors else "")
        )


def watch_runs(
    site: hosts.Site, seen: Seen, webs: tuple[str, ...], host: str, database: str
) -> None:
    """The person sends a demo task from `host` and watches it on a socket to each of `webs`;
    each event's latency to each socket."""
    client = site.client("bench", DEMO_TASK, webs=webs, host=host)
    out, err = client.communicate(timeout=300)
    lines = [json.loads(line) for line in out.splitlines()]
    seen.errors += [line["what"] for line in lines if line["event"] == "error"]
    if client.returncode != 0 and not seen.errors:
        seen.errors.append(err[-500:])
    seen.reconnects += sum(line["event"] == "reconnect" for line in lines)
    runs = sorted({line["run"] for line in lines if line["event"] == "sent"})
    created = stamps(site, runs, database)
    covered: dict[tuple[int, int], int] = {}
    watching_since: dict[tuple[int, int], float] = {}
    for line in lines:
        if line["event"] != "frame" or line["seq"] is None:
            continue
        key = (line["run"], line["socket"])
        since = watching_since.setdefault(key, line["at"])  # its first frame: it watches
        for seq in range(covered.get(key, 0) + 1, line["seq"] + 1):
            seen.events_seen += 1
            at, kind = created[line["run"], seq]
            if at > since:  # live, not read back when it connected
                seen.latencies.append(line["at"] - at)
                seen.slowest.append((line["at"] - at, kind, line["web"]))
        covered[key] = max(covered.get(key, 0), line["seq"])
    seen.events_logged += len(created) * len(webs)


def stamps(
    site: hosts.Site, run_ids: list[int], database: str
) -> dict[tuple[int, int], tuple[float, str]]:
    """Each event's `created_at` (epoch seconds) and kind, by (run, seq)."""
    with site.connect(database) as db:
        rows = db.execute(
            "SELECT run_id, seq, extract(epoch FROM created_at), kind FROM agent_runevent "
            "WHERE run_id = ANY(%s)",
            (run_ids,),
        ).fetchall()
    return {(run, seq): (float(at), kind) for run, seq, at, kind in rows}


def start_solo(site: hosts.Site) -> None:
    """Redis, daphne and a worker on the PostgreSQL host, all over its loopback, on a database
    of their own there."""
    env = site.loop_env("pg")
    workspaces = site.root / "solo-workspaces"  # its person 1 is not the other site's
    workspaces.mkdir(mode=0o711)
    env.update(
        LOOP_WORKSPACES_DIR=str(workspaces),
        DATABASE_URL=f"postgresql://postgres@127.0.0.1:{hosts.PG_PORT}/{SOLO_DATABASE}",
        REDIS_URL=f"redis://127.0.0.1:{SOLO_REDIS_PORT}/0",
        ALLOWED_HOSTS="127.0.0.1",
        PGAPPNAME="loop27-solo",
    )
    site.create_database(SOLO_DATABASE)
    site.run_on("pg", [sys.executable, "manage.py", "migrate", "--no-input"], env)
    site.create_person("bench", SOLO_DATABASE)
    redis = ["redis-server", "--bind", "127.0.0.1", "--port", str(SOLO_REDIS_PORT),
             "--save", "", "--appendonly", "no"]  # fmt: skip
    site.spawn("pg", "solo-redis", redis, {"PATH": env["PATH"]})
    web = [sys.executable, "-m", "daphne", "--bind", "127.0.0.1", "--port", str(SOLO_WEB_PORT),
           "loopsite.asgi:application"]  # fmt: skip
    site.spawn("pg", "solo-web", web, env)
    worker = [sys.executable, "manage.py", "worker", "--concurrency", str(site.concurrency)]
    site.spawn("pg", "solo-worker", worker, env)
    site.wait_for(lambda: solo_answers(site), "the one-host daphne", needs="solo-web")
    site.wait_for(lambda: site.workers_ready("solo-worker"), "the one-host worker")


def solo_answers(site: hosts.Site) -> bool:
    probe = [sys.executable, "-c", "import urllib.request as u; u.urlopen("
             f"'http://127.0.0.1:{SOLO_WEB_PORT}/accounts/login/', timeout=5)"]  # fmt: skip
    try:
        site.run_on("pg", probe)
    except (RuntimeError, subprocess.TimeoutExpired):
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="demo runs per setting")
    parser.add_argument("--latency-ms", type=int, default=200, help="the mock's time per turn")
    parser.add_argument("--slowest", type=int, default=0, help="print the N slowest events")
    options = parser.parse_args()
    why_not = hosts.why_not_possible()
    if why_not:
        raise SystemExit(f"bench/topology.py needs Linux network namespaces as root: {why_not}")
    across, alone = Seen("across hosts"), Seen("on one host")
    solo = f"http://127.0.0.1:{SOLO_WEB_PORT}"
    with hosts.site(latency_ms=options.latency_ms) as site:
        site.create_person("bench")
        start_solo(site)
        for _ in range(options.runs):
            watch_runs(site, across, hosts.WEBS, "client", hosts.DATABASE)
            watch_runs(site, alone, (solo, solo), "pg", SOLO_DATABASE)
    print(
        f"Event latency, worker to page: {options.runs} demo runs per setting, alternating, the "
        f"mock at {options.latency_ms} ms a turn, two sockets per run"
    )
    for seen in (across, alone):
        print(seen.line())
        for latency, kind, web in sorted(seen.slowest, reverse=True)[: options.slowest]:
            print(f"    {1000 * latency:7.1f} ms  {kind:<20} {web}")


if __name__ == "__main__":
    main()
