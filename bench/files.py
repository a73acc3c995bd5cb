"""A person's files through the real stack: a 10 MB upload (its time, and what it costs daphne's
memory) and the Files panel of a workspace of 10,000 files.

    .venv/bin/python bench/files.py [--uploads 5] [--size-bytes 10485760] [--parts 1]
                                    [--files 10000] [--lists 10] [--project /work/main] [--keep]

Starts a fresh site (bench/_stack.py: daphne, an embedded PostgreSQL of its own, Redis; no worker:
nothing here runs the agent) and two bench users, who log in through the login form as a browser
does and take the CSRF token from the csrftoken cookie the Files panel (`GET /files/`) sets.

Upload: one small upload first (the view's code loaded once), then --uploads times a file of
--size-bytes random bytes (default LOOP_UPLOAD_MAX_BYTES's default, the largest the site takes),
each under a new name, `POST /files/upload/` as --parts multipart parts named `file` (one by
default; LOOP_UPLOAD_MAX_FILES for the largest body the site takes) with the csrfmiddlewaretoken
field and the page's Origin, as the panel's form sends it. Each upload is checked on disk (the
file in the workspace, byte for byte), then deleted, so every upload has the same room. Figures:
time per upload (the whole round trip, body sent to answer received) p50 and max; daphne's
resident memory (VmRSS of the daphne process, sampled every 10 ms by a thread) before the first
upload, at its peak during each upload, and after the last, and the peak's and the after's growth
over before as a fraction of the size of the files one request carries.

Listing: the other user's workspace gets --files small files in its top folder, written as the
site's own processes would (workspace.directory with the site's settings, through `manage.py shell`,
each owned by the workspace's owner, each modified at its own second). Figures: `GET /files/`
(the page: listing, newest first, and quota use) p50 and max over --lists requests after one
warm-up, with the page's size; and the listing function of workspace/browse.py, called in-process
(in one `manage.py shell` with the site's settings) as often, p50 and max.

Floors (issue 18): an upload does not grow daphne's memory by the file's size, after it (it keeps
nothing) nor at its peak (the file is never held whole in memory): both growths under half the
file's size; listing 10,000 files under 200 ms (p50 of the page and of the function).
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._stack import (
    MAIN_PROJECT,
    Person,
    Stack,
    percentile,
    rss_mb,
    running_stack,
    title_of,
)

MB = 1024 * 1024
SAMPLE_SECONDS = 0.01
LISTING_FLOOR_MS = 200.0
GROWTH_FLOOR = 0.5  # of the file's size


class RssSampler:
    """daphne's VmRSS every 10 ms in a thread of its own, so a peak between two requests' ends is
    seen; `mark()` starts a new window, `peak` is the window's highest."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> float:
        now = rss_mb(self.pid)
        with self._lock:
            self.peak = max(self.peak, now)
        return now

    def mark(self) -> float:
        """The memory now, which also starts a new peak window."""
        now = rss_mb(self.pid)
        with self._lock:
            self.peak = now
        return now

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Upload:
    """One upload as measured: its round trip, and daphne's memory around it (MB)."""

    seconds: float
    before: float
    peak: float
    after: float


@dataclass
class Uploads:
    size: int  # of each file
    parts: int  # files per request
    each: list[Upload] = field(default_factory=list)
    before: float = 0.0  # daphne's RSS after the warm-up upload, before the first measured one
    after: float = 0.0  # and after the last

    def lines(self) -> list[str]:
        times = [upload.seconds * 1000 for upload in self.each]
        peak = max(upload.peak for upload in self.each)
        size_mb = self.size * self.parts / MB  # the files one request carries
        peak_ratio = (peak - self.before) / size_mb
        after_ratio = (self.after - self.before) / size_mb
        per_upload = ", ".join(f"{u.before:.1f}/{u.peak:.1f}/{u.after:.1f}" for u in self.each)
        return [
            f"upload of {self.parts} x {self.size} bytes ({size_mb:.1f} MiB a request) "
            f"x {len(self.each)}: "
            f"p50 {percentile(times, 0.5):.0f} ms, max {max(times):.0f} ms, "
            f"{size_mb / (percentile(times, 0.5) / 1000):.0f} MiB/s at p50",
            f"daphne RSS: before {self.before:.1f} MB, peak {peak:.1f} MB, "
            f"after {self.after:.1f} MB (before/peak/after each upload: {per_upload})",
            f"growth over before / the request's files' size (floor: under {GROWTH_FLOOR}): "
            f"at the peak {peak_ratio:.2f} ({verdict(peak_ratio < GROWTH_FLOOR)}), "
            f"after {after_ratio:.2f} ({verdict(after_ratio < GROWTH_FLOOR)})",
        ]


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def user_id(stack: Stack, username: str) -> int:
    return int(stack.query("SELECT id FROM auth_user WHERE username = %s", (username,))[0][0])


async def files_token(person: Person) -> str:
    """Open the Files panel, as the person would before uploading: its csrftoken cookie."""
    page = await person.client.get("/files/")
    token = person.client.cookies.get("csrftoken")
    if page.status_code != 200 or not token:
        raise SystemExit(f"GET /files/ answered {page.status_code}: {title_of(page.text)}")
    return token


async def post_upload(person: Person, token: str, source: Path, names: list[str]) -> float:
    """One `POST /files/upload/` of source once per name, each a part named `file`; the round
    trip in seconds."""
    with ExitStack() as bodies:
        parts = [
            ("file", (name, bodies.enter_context(source.open("rb")), "application/octet-stream"))
            for name in names
        ]
        started = time.perf_counter()
        answer = await person.client.post(
            "/files/upload/",
            data={"csrfmiddlewaretoken": token},
            files=parts,
            headers={**person.headers, "X-CSRFToken": token},
        )
        took = time.perf_counter() - started
    if answer.status_code not in (200, 302, 303):
        raise SystemExit(f"the upload answered {answer.status_code}: {title_of(answer.text)}")
    return took


def take_stored(stack: Stack, owner: int, names: list[str], source: Path) -> None:
    """Check each upload is in the workspace, byte for byte, then delete it (the next upload has
    the same room in the quota)."""
    sent = source.read_bytes()
    for name in names:
        stored = Path(stack.env["LOOP_WORKSPACES_DIR"]) / str(owner) / name
        if not stored.is_file() or stored.read_bytes() != sent:
            found = f"{stored.stat().st_size} other bytes" if stored.is_file() else "no file"
            raise SystemExit(
                f"the upload of {name} was answered but not stored whole ({found}); "
                f"see {stack.var_dir}/daphne.log"
            )
        stored.unlink()


async def measure_uploads(
    stack: Stack, username: str, count: int, size: int, parts: int, scratch: Path
) -> Uploads:
    assert stack.web is not None
    owner = user_id(stack, username)
    person = Person(stack, username)
    big, small = scratch / "big.bin", scratch / "small.bin"
    big.write_bytes(os.urandom(size))
    small.write_bytes(os.urandom(1024))
    result = Uploads(size, parts)
    try:
        await person.log_in()
        token = await files_token(person)
        await post_upload(person, token, small, ["warm-up.bin"])
        take_stored(stack, owner, ["warm-up.bin"], small)
        with RssSampler(stack.web.pid) as sampler:
            result.before = sampler.mark()
            for n in range(count):
                names = [f"upload-{n}-{part}.bin" for part in range(parts)]
                before = sampler.mark()
                took = await post_upload(person, token, big, names)
                after = sampler.sample()
                result.each.append(Upload(took, before, sampler.peak, after))
                take_stored(stack, owner, names, big)
            result.after = rss_mb(stack.web.pid)
    finally:
        await person.close()
    return result


# Run by the site's own `manage.py shell`: the workspace as the site makes it, the files in it.
FILL_SCRIPT = """
import json, os, time
from django.contrib.auth.models import User
from workspace.directory import ensure_workspace, workspace_path
user = User.objects.get(username={username!r})
workspace = ensure_workspace(workspace_path(user.pk), user.pk)
owner = os.stat(workspace)
base = time.time() - {count}
for n in range({count}):
    path = workspace / f"note-{{n:05d}}.txt"
    path.write_text(f"note {{n}}: a line of text in a bench workspace\\n")
    os.chown(path, owner.st_uid, owner.st_gid)
    os.utime(path, (base + n, base + n))
print(json.dumps({{"workspace": str(workspace), "files": len(os.listdir(workspace))}}))
"""

# The listing function, called in-process as the Files view calls it.
LIST_SCRIPT = """
import json, time
from django.contrib.auth.models import User
from workspace import browse
from workspace.directory import ensure_workspace, workspace_path
user = User.objects.get(username={username!r})
workspace = ensure_workspace(workspace_path(user.pk), user.pk)
times, shown, total = [], 0, 0
for _ in range({repeats} + 1):
    started = time.perf_counter()
    listing = browse.{function}(workspace, "")
    times.append(time.perf_counter() - started)
    shown, total = len(listing.entries), listing.total
print(json.dumps({{"times": times[1:], "shown": shown, "total": total}}))
"""
LIST_FUNCTION = "list_folder"


@dataclass
class Listing:
    files: int
    page: list[float] = field(default_factory=list)  # seconds per GET /files/
    page_bytes: int = 0
    function: list[float] = field(default_factory=list)  # seconds per in-process listing
    shown: int = 0  # entries the function returned
    total: int = 0  # of how many it found

    def lines(self) -> list[str]:
        page = [seconds * 1000 for seconds in self.page]
        function = [seconds * 1000 for seconds in self.function]
        return [
            f"listing {self.files} files: GET /files/ p50 {percentile(page, 0.5):.0f} ms, "
            f"max {max(page):.0f} ms ({self.page_bytes / 1024:.0f} KiB page); "
            f"workspace.browse.{LIST_FUNCTION} in-process p50 {percentile(function, 0.5):.1f} ms, "
            f"max {max(function):.1f} ms ({self.shown} of {self.total} entries returned)",
            f"floor: p50 under {LISTING_FLOOR_MS:.0f} ms: page "
            f"{verdict(percentile(page, 0.5) < LISTING_FLOOR_MS)}, function "
            f"{verdict(percentile(function, 0.5) < LISTING_FLOOR_MS)}",
        ]


async def time_pages(
    stack: Stack, username: str, repeats: int, newest: str
) -> tuple[list[float], int]:
    person = Person(stack, username)
    times: list[float] = []
    size = 0
    try:
        await person.log_in()
        for n in range(repeats + 1):  # the first loads what the page loads once
            started = time.perf_counter()
            page = await person.client.get("/files/")
            took = time.perf_counter() - started
            if page.status_code != 200 or newest not in page.text:
                raise SystemExit(
                    f"GET /files/ answered {page.status_code} without {newest}: "
                    f"{title_of(page.text)}"
                )
            if n:
                times.append(took)
            size = len(page.content)
    finally:
        await person.close()
    return times, size


def shell_json(stack: Stack, script: str) -> dict:
    """Run script in the site's `manage.py shell`; the JSON its last line prints."""
    return json.loads(stack.manage("shell", "-c", script).strip().splitlines()[-1])


def measure_listing(stack: Stack, username: str, count: int, repeats: int) -> Listing:
    filled = shell_json(stack, FILL_SCRIPT.format(username=username, count=count))
    result = Listing(files=filled["files"])
    newest = f"note-{count - 1:05d}.txt"
    result.page, result.page_bytes = asyncio.run(time_pages(stack, username, repeats, newest))
    script = LIST_SCRIPT.format(username=username, repeats=repeats, function=LIST_FUNCTION)
    listed = shell_json(stack, script)
    result.function = listed["times"]
    result.shown, result.total = listed["shown"], listed["total"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=5)
    parser.add_argument("--size-bytes", type=int, default=10 * MB, help="of each file")
    parser.add_argument("--parts", type=int, default=1, help="files per upload request")
    parser.add_argument("--files", type=int, default=10_000, help="in the listed workspace")
    parser.add_argument("--lists", type=int, default=10, help="listings timed")
    parser.add_argument("--project", type=Path, default=MAIN_PROJECT, help="the tree to run")
    parser.add_argument("--keep", action="store_true", help="keep the site's directory (logs)")
    options = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="loop-bench-files-") as scratch,
        running_stack(options.project, "worker", latency_ms=0, keep=options.keep) as stack,
    ):
        uploader, lister = stack.create_people("bench-files-", 2)
        print(f"daphne in {stack.project}, pid {stack.web.pid if stack.web else '?'}")
        uploads = asyncio.run(
            measure_uploads(
                stack, uploader, options.uploads, options.size_bytes, options.parts, Path(scratch)
            )
        )
        print("\n".join(uploads.lines()), flush=True)
        listing = measure_listing(stack, lister, options.files, options.lists)
        print("\n".join(listing.lines()), flush=True)


if __name__ == "__main__":
    main()
