"""A person's export of their data through the real stack: what one export, and several at once,
take from the web server (issue 25, finding 2).

    .venv/bin/python bench/export.py [--files 4] [--file-mb 48] [--at-once 6] [--project DIR]

Starts a fresh site (bench/_stack.py: daphne, an embedded PostgreSQL of its own, Redis) and
--at-once bench users, each with the same workspace: --files files of --file-mb MB of random
bytes (what large files mostly are: compressed already), hard links of one set. Each logs in
through the login form and exports from the My data page as the browser does: the page's POST
form with its CSRF token where the page has one, else the old GET link; the zip is read to its
end as fast as the client can.

Figures, for one export and then for --at-once people exporting at once: each export's status,
bytes and time; daphne's CPU seconds over the whole (user + system, from /proc); daphne's
resident memory at its peak over what it was before (VmRSS sampled every 10 ms); and the peak of
temporary disk daphne held (the sizes of the files it has open in its TMPDIR, sampled likewise:
a temporary file is unlinked at once, so only its open descriptor shows it).

Run it on the code before issue 25 with --project pointing at a checkout of it, e.g.
`git archive a88bac3 | tar -x -C /tmp/loop-before && ln -s $PWD/.venv /tmp/loop-before/.venv`.
"""

import argparse
import asyncio
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import CSRF_FIELD, MAIN_PROJECT, Person, Stack, rss_mb, running_stack

MB = 1024 * 1024
SAMPLE_SECONDS = 0.01
PAGE = "/accounts/data/"
EXPORT = "/accounts/data/export/"
TICKS = os.sysconf("SC_CLK_TCK")

# Run by the site's own `manage.py shell`: the first person's workspace filled, the others' made
# of hard links to its files (the same bytes, no more disk).
FILL_SCRIPT = """
import os
from django.contrib.auth.models import User
from workspace.directory import ensure_workspace, workspace_path
first = None
for user in User.objects.filter(username__startswith="bench-export-").order_by("pk"):
    workspace = ensure_workspace(workspace_path(user.pk), user.pk)
    owner = os.stat(workspace)
    for n in range({files}):
        path = workspace / f"large-{{n}}.bin"
        if first is None:
            with path.open("wb") as out:
                for _ in range({file_mb}):
                    out.write(os.urandom(1024 * 1024))
        else:
            os.link(first / path.name, path)
        os.chown(path, owner.st_uid, owner.st_gid)
    first = first or workspace
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def temporary_bytes(pid: int, tmpdir: str) -> int:
    """The size of every file daphne has open under its TMPDIR, unlinked ones included."""
    total = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd).startswith(tmpdir):
                total += fd.stat().st_size
        except OSError:  # closed meanwhile
            continue
    return total


class Sampler:
    """daphne's VmRSS and temporary disk every 10 ms in a thread of its own; their peaks."""

    def __init__(self, pid: int, tmpdir: str) -> None:
        self.pid, self.tmpdir = pid, tmpdir
        self.rss_peak = rss_mb(pid)
        self.temporary_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.rss_peak = max(self.rss_peak, rss_mb(self.pid))
            self.temporary_peak = max(self.temporary_peak, temporary_bytes(self.pid, self.tmpdir))

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Export:
    status: int
    size: int
    seconds: float


async def export(person: Person) -> Export:
    """Export as the My data page offers it: its POST form, or the old GET link."""
    page = await person.client.get(PAGE)
    token = CSRF_FIELD.search(page.text)
    posts = f'<form method="post" action="{EXPORT}">' in page.text
    started = time.perf_counter()
    if posts and token:
        request = person.client.build_request(
            "POST", EXPORT, data={"csrfmiddlewaretoken": token.group(1)}, headers=person.headers
        )
    else:
        request = person.client.build_request("GET", EXPORT)
    answer = await person.client.send(request, stream=True)
    size = 0
    async for chunk in answer.aiter_raw():
        size += len(chunk)
    await answer.aclose()
    return Export(answer.status_code, size, time.perf_counter() - started)


async def measure(stack: Stack, people: list[Person], tmpdir: str) -> None:
    pid = stack.web.pid if stack.web else 0
    cpu_before, rss_before = cpu_seconds(pid), rss_mb(pid)
    with Sampler(pid, tmpdir) as sampled:
        exports = await asyncio.gather(*(export(person) for person in people))
    cpu = cpu_seconds(pid) - cpu_before
    for person, done in zip(people, exports, strict=True):
        print(
            f"  {person.username}: {done.status}, {done.size / MB:.1f} MB in {done.seconds:.2f} s"
        )
    print(
        f"  daphne: {cpu:.2f} CPU s; memory {rss_before:.0f} -> peak {sampled.rss_peak:.0f} MB "
        f"(+{sampled.rss_peak - rss_before:.0f}); temporary disk peak "
        f"{sampled.temporary_peak / MB:.1f} MB",
        flush=True,
    )


async def run(stack: Stack, usernames: list[str], tmpdir: str) -> None:
    people = [Person(stack, name) for name in usernames]
    try:
        for person in people:
            await person.log_in()
        print("One export:")
        await measure(stack, people[:1], tmpdir)
        print(f"{len(people)} people exporting at once:")
        await measure(stack, people, tmpdir)
    finally:
        for person in people:
            await person.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=4, help="large files per workspace")
    parser.add_argument("--file-mb", type=int, default=48, help="of each file")
    parser.add_argument("--at-once", type=int, default=6, help="people exporting at once")
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    parser.add_argument("--keep", action="store_true", help="keep the site's directory (logs)")
    options = parser.parse_args()
    settings = {"LOOP_EXPORT_INTERVAL_SECONDS": "0"}
    with running_stack(
        options.project, "worker", latency_ms=0, keep=options.keep, **settings
    ) as stack:
        tmpdir = str(stack.var_dir / "tmp")
        os.mkdir(tmpdir)
        stack.env["TMPDIR"] = tmpdir
        stack.restart_web()
        usernames = stack.create_people("bench-export-", options.at_once)
        stack.manage(
            "shell", "-c", FILL_SCRIPT.format(files=options.files, file_mb=options.file_mb)
        )
        size = options.files * options.file_mb
        print(f"daphne in {stack.project}; each workspace {options.files} x {options.file_mb} MB "
              f"= {size} MB of random bytes")  # fmt: skip
        asyncio.run(run(stack, usernames, tmpdir))


if __name__ == "__main__":
    main()
