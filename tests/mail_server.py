"""A real SMTP server for the tests (aiosmtpd, on a free local port), with Loop's mail settings
pointed at it: what Loop mails goes over SMTP and is read back as a mailbox would have it."""

import asyncio
import email
import email.policy
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session


@dataclass
class Mailbox:
    """Every message the server accepted, in order."""

    received: list[EmailMessage] = field(default_factory=list)
    port: int = 0  # where the server listens
    # Cleared, the server holds each message before accepting it, until it is set again.
    accepting: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.accepting.set()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        await asyncio.get_running_loop().run_in_executor(None, self.accepting.wait)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.received.append(message)  # type: ignore[arg-type]  # the default policy's class
        return "250 Message accepted for delivery"

    def to(self, address: str) -> list[EmailMessage]:
        return [message for message in self.received if address in message["To"]]


def body(message: EmailMessage) -> str:
    return message.get_body(("plain",)).get_content()


def link_in(message: EmailMessage) -> str:
    """The one http(s) address in the mail's text."""
    (found,) = re.findall(r"https?://\S+", body(message))
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def mailbox(settings) -> Iterator[Mailbox]:
    """Loop's mail sent through an SMTP server of the test's own."""
    mailbox = Mailbox(port=free_port())
    controller = Controller(mailbox, hostname="127.0.0.1", port=mailbox.port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_USE_TLS = False
    try:
        yield mailbox
    finally:
        controller.stop()
