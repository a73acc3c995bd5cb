"""A person on the client host: logs in on web host A, sends tasks with the chat's send form, and
watches each run on two sockets at once, one to web host A and one to web host B, printing what
it sees as JSON lines (stdout) for the test or the bench that started it.

    python -m tests.topology.client --web URL_A --web URL_B --user NAME --password P --task T
        [--runs N]

Lines: {"event": "sent", "run": ID}; per frame a socket receives, {"event": "frame", "web": URL,
"socket": its index among the --web URLs, "run": ID, "at": epoch seconds, "seq": the seq
marker's seq (null if none), "finished": bool, "cards": [the id of each event card, in order],
"state": what the socket says of its live updates (live, degraded, closed; null if not said)};
{"event": "reconnect", ...} when a socket closed as a page reconnects after (1006, 1011, 1012,
1013, or no close frame at all) and was opened again after the last seq it had; {"event":
"done", "web": URL, "run": ID} at the run's end; {"event": "error", "what": ...} when the site
failed the person. Imports nothing of Loop's: it is a browser, only over the network.
"""

import argparse
import json
import re
import sys
import threading
import time
from typing import Any

import httpx2
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import connect

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
SEQ_MARKER = re.compile(r'id="run-(\d+)-seq" data-run="\d+" data-seq="(\d+)"( data-watch)?')
RECONNECTS = (1006, 1011, 1012, 1013)  # the closes after which the page's socket reconnects
WAIT = 120.0  # seconds: a bound that turns a hang into a failure
_print_lock = threading.Lock()


def say(**line: Any) -> None:
    with _print_lock:
        print(json.dumps(line), flush=True)


def log_in(client: httpx2.Client, origin: str, user: str, password: str) -> None:
    page = client.get("/accounts/login/")
    token = CSRF_FIELD.search(page.text)
    if token is None:
        raise RuntimeError(f"no CSRF token on the login page ({page.status_code})")
    answer = client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": user, "password": password},
        headers={"Origin": origin},
    )
    if answer.status_code != 302 or "sessionid" not in client.cookies:
        raise RuntimeError(f"{user} could not log in ({answer.status_code})")


def send(client: httpx2.Client, origin: str, task: str) -> int:
    """Post the task with the home page's send form; the run the conversation page shows."""
    home = client.get("/")
    token = CSRF_FIELD.search(home.text)
    if home.status_code != 200 or token is None:
        raise RuntimeError(f"the home page answered {home.status_code}")
    answer = client.post(
        "/send/", data={"csrfmiddlewaretoken": token.group(1), "task": task},
        headers={"Origin": origin},
    )  # fmt: skip
    if answer.status_code != 302:
        raise RuntimeError(f"send answered {answer.status_code}")
    page = client.get(answer.headers["location"])
    markers = SEQ_MARKER.findall(page.text)
    if not markers:
        raise RuntimeError(f"the conversation page answered {page.status_code} with no run")
    return int(markers[-1][0])


def watch(web: str, cookie: str, run_id: int, socket: int) -> None:
    """Watch the run from its first event on a socket to `web` (its page's own origin), opened
    again after the last seq seen whenever it drops as a page's would, until the run's end."""
    url = web.replace("http://", "ws://", 1) + "/ws/runs/"
    seen = 0
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            with connect(
                url, origin=web, additional_headers={"Cookie": cookie}, max_size=2**20,
                open_timeout=10,
            ) as page:  # fmt: skip
                page.send(json.dumps({"watch": run_id, "after": seen}))
                while True:
                    seq, finished = frame(web, socket, run_id, page.recv(timeout=WAIT))
                    seen = max(seen, seq or 0)
                    if finished:
                        say(event="done", web=web, run=run_id)
                        return
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd else None
            if code is not None and code not in RECONNECTS:
                say(event="error", web=web, run=run_id, what=f"socket closed {code}")
                return
            say(event="reconnect", web=web, run=run_id, after=seen, code=code)
        except (OSError, InvalidHandshake, TimeoutError) as error:
            say(event="reconnect", web=web, run=run_id, after=seen, code=repr(error)[:200])
        time.sleep(0.5)
    say(event="error", web=web, run=run_id, what="gave up waiting for the run's end")


def frame(web: str, socket: int, run_id: int, message: str | bytes) -> tuple[int | None, bool]:
    """Say what one frame holds for this run: its event cards and its seq marker."""
    text = message if isinstance(message, str) else message.decode()
    cards = re.findall(rf'id="((?:ev|call)-{run_id}-[\w-]+)"', text)
    state = re.search(r'id="socket-status"[^>]* data-state="(\w+)"', text)
    seq, finished = None, False
    for run, marked, watching in SEQ_MARKER.findall(text):
        if int(run) == run_id:
            seq, finished = int(marked), not watching
    say(
        event="frame", web=web, socket=socket, run=run_id, at=time.time(), seq=seq,
        finished=finished, cards=cards, state=state.group(1) if state else None,
    )  # fmt: skip
    return seq, finished


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--web", action="append", required=True, help="a web host's URL")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--runs", type=int, default=1, help="sent one after the other")
    options = parser.parse_args()
    home = options.web[0]
    with httpx2.Client(base_url=home, timeout=WAIT) as client:
        try:
            log_in(client, home, options.user, options.password)
        except (RuntimeError, httpx2.HTTPError) as error:
            say(event="error", what=f"log in: {error}")
            return 1
        cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
        for _ in range(options.runs):
            try:
                run_id = send(client, home, options.task)
            except (RuntimeError, httpx2.HTTPError) as error:
                say(event="error", what=f"send: {error}")
                return 1
            say(event="sent", run=run_id, at=time.time())
            watchers = [
                threading.Thread(target=watch, args=(web, cookie, run_id, number))
                for number, web in enumerate(options.web)
            ]
            for watcher in watchers:
                watcher.start()
            for watcher in watchers:
                watcher.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
