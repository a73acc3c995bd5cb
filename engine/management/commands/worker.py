"""`manage.py worker`: one run-engine worker process, on any machine that reaches DATABASE_URL."""

from argparse import ArgumentTypeError
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from engine.execution import process_name
from engine.worker import WorkerConfig, become_supervisor, serve


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ArgumentTypeError("must be 1 or more")
    return number


class Command(BaseCommand):
    help = (
        "Work runs: up to --concurrency at once (default LOOP_WORKER_CONCURRENCY), picked up by "
        "LISTEN/NOTIFY as they are queued. SIGTERM or Ctrl-C hands the running runs back (another "
        "worker, or this one started again, resumes them) and exits 0. A database that goes away "
        "is waited for. --supervise starts the worker as a child and starts it again whenever it "
        "dies (what `make run` uses)."
    )

    # The worker runs the checks itself; the supervisor has no use for them (the sandbox's check
    # starts one) and becomes a process without Django at once.
    requires_system_checks = ()

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency", type=positive, help="Runs worked at once in this process."
        )
        parser.add_argument(
            "--name", default="", help="Who works the runs, as they show it (default: host:pid)."
        )
        parser.add_argument(
            "--supervise",
            action="store_true",
            help="Run the worker as a child process and start it again whenever it dies.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["supervise"]:
            become_supervisor(worker_arguments(options))
        self.check()
        config = WorkerConfig(
            concurrency=options["concurrency"] or settings.LOOP_WORKER_CONCURRENCY,
            name=options["name"] or process_name(),
            stale_seconds=settings.LOOP_STALE_SECONDS,
        )
        serve(config)


def worker_arguments(options: dict[str, Any]) -> list[str]:
    """The supervised worker's own options: the same ones, without --supervise."""
    arguments = []
    if options["concurrency"]:
        arguments += ["--concurrency", str(options["concurrency"])]
    if options["name"]:
        arguments += ["--name", options["name"]]
    return arguments
