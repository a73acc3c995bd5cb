"""Uploads streamed into the workspace: each part goes, chunk by chunk, into an unnamed file in
the workspace's filesystem (O_TMPFILE), which no snippet or listing can name, and gets its name
only when complete and admitted (workspace.browse).

Never the whole file in memory: Django's MultiPartParser hands this handler one chunk at a time
(64 KiB) and it writes each to disk at once. A part past LOOP_UPLOAD_MAX_BYTES, or past the room
the workspace quota leaves, is dropped there, with the reason, and the other parts go on.

Django's parser strips a file name down to something it finds safe ("../x" becomes "x", ".." is
dropped without a word, control characters vanish); here the name the browser sent reaches the
file tools' rules instead, so that the person reads what was refused and why.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopFutureHandlers
from django.http import HttpRequest
from django.http.multipartparser import MultiPartParser
from django.utils.datastructures import ImmutableList

from workspace import browse

FIELD = "file"


class Cause(StrEnum):
    """Why a part was refused, for a program to tell apart (the API's error codes); the
    person reads the refusal's sentence."""

    FIELD = "field"  # not a part named FIELD
    NAME = "name"  # a name the workspace's rules refuse (a path, '..', a control character)
    COUNT = "count"  # past LOOP_UPLOAD_MAX_FILES parts
    SIZE = "size"  # past LOOP_UPLOAD_MAX_BYTES
    QUOTA = "quota"  # past the room the workspace quota leaves
    DISK = "disk"  # the disk refused it (full, say)


@dataclass
class Streamed:
    """A part written whole to its unnamed file, waiting for browse.store_upload."""

    name: str
    incoming: browse.Incoming

    @property
    def size(self) -> int:
        return self.incoming.written

    def close(self) -> None:
        """Django closes every uploaded file when a parse fails (too many files, say) and when
        the request ends: a part not named by then is gone, a named one is left alone."""
        self.incoming.discard()


@dataclass
class WorkspaceUploadHandler(FileUploadHandler):
    """Streams every part named `file` into the workspace; refuses, per part, what may not be
    stored. `complete` are the parts written whole; `refusals` says, per part, why not, and
    `causes` names each refusal's cause, in the same order."""

    workspace: Path
    max_bytes: int = field(default_factory=lambda: settings.LOOP_UPLOAD_MAX_BYTES)
    max_files: int = field(default_factory=lambda: settings.LOOP_UPLOAD_MAX_FILES)
    complete: list[Streamed] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    root: int | None = None
    current: Streamed | None = None
    room_bytes: int = 0
    room_files: int = 0
    parts: int = 0

    def __post_init__(self) -> None:
        super().__init__(request=None)

    def handle_raw_input(
        self, input_data: Any, META: Any, content_length: int, boundary: Any, encoding: Any = None
    ) -> None:
        """Before the first byte of the body: open the workspace and measure its room."""
        self.root = browse.open_workspace(self.workspace)
        self.room_bytes, self.room_files = browse.room(self.root)

    def new_file(self, field_name: str, file_name: str, *args: Any, **kwargs: Any) -> None:
        super().new_file(field_name, file_name, *args, **kwargs)
        self.current = None
        self.parts += 1
        refused = self._refusal(field_name, file_name)
        if refused is not None:
            self._refuse(*refused)
            raise SkipFile
        if self.root is None:
            raise SkipFile
        try:
            self.current = Streamed(file_name, browse.begin_upload(self.root))
        except OSError as error:
            self._refuse(Cause.DISK, f"{file_name} was not stored: {error.strerror}.")
            raise SkipFile from None
        self.room_files -= 1
        raise StopFutureHandlers

    def _refuse(self, cause: Cause, refusal: str) -> None:
        self.refusals.append(refusal)
        self.causes.append(cause)

    def _refusal(self, field_name: str, file_name: str) -> tuple[Cause, str] | None:
        if field_name != FIELD:
            return Cause.FIELD, (
                f"A part named {field_name!r} was ignored: send files as parts named {FIELD!r}."
            )
        try:
            browse.check_upload_name(file_name)
        except browse.BrowseError as refused:
            return Cause.NAME, f"Not stored: {refused.message}"
        if self.parts > self.max_files:
            return Cause.COUNT, (
                f"{file_name} was not stored: at most {self.max_files} files per upload."
            )
        if self.room_files < 1 or self.room_bytes < 0:
            return Cause.QUOTA, self._over_quota(file_name)
        return None

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        current = self.current
        if current is None:
            raise SkipFile
        if current.size + len(raw_data) > self.max_bytes:
            self._drop(
                Cause.SIZE,
                f"{current.name} was not stored: it is over the {self.max_bytes:,}-byte limit "
                "per file.",
            )
        if len(raw_data) > self.room_bytes:
            self._drop(Cause.QUOTA, self._over_quota(current.name))
        try:
            current.incoming.write(raw_data)
        except OSError as error:  # the disk full, say: this part is lost, not the request
            self._drop(Cause.DISK, f"{current.name} was not stored: {error.strerror}.")
        self.room_bytes -= len(raw_data)

    def _drop(self, cause: Cause, refusal: str) -> None:
        """Give up the current part (what it wrote is deleted at once) and skip the rest of it."""
        if self.current is not None:
            self.room_bytes += self.current.size
            self.room_files += 1
            self.current.incoming.discard()
            self.current = None
        self._refuse(cause, refusal)
        raise SkipFile

    def _over_quota(self, name: str) -> str:
        if self.root is None:
            return f"{name} was not stored: your workspace is not available."
        return browse.over_quota(name, self.root)

    # Django files what this returns in request.FILES: here a part already stored, not an
    # UploadedFile as django-stubs says.
    def file_complete(self, file_size: int) -> Streamed | None:  # type: ignore[override]
        current, self.current = self.current, None
        if current is None:
            return None
        current.incoming.finish()
        self.complete.append(current)
        return current

    def upload_interrupted(self) -> None:
        if self.current is not None:
            self.current.incoming.discard()
            self.current = None

    def discard(self) -> None:
        """Close every part's file (what was not given its name is gone with it) and the
        workspace: called whatever happened to the request (a refused CSRF token included)."""
        self.upload_interrupted()
        for streamed in self.complete:
            streamed.incoming.discard()
        if self.root is not None:
            os.close(self.root)
            self.root = None


class OriginalNameParser(MultiPartParser):
    """Django's parser, leaving file names as sent (but for HTML entities, as Django decodes
    them), for the workspace's rules to judge."""

    def sanitize_file_name(self, file_name: str) -> str | None:
        return html.unescape(file_name) or None


def stream_into_workspace(request: HttpRequest, handler: WorkspaceUploadHandler) -> None:
    """Make the request parse its body through handler alone, when first read. Set before
    anything reads request.POST or request.FILES (the CSRF check included)."""
    request.upload_handlers = [handler]

    def parse(meta: Any, post_data: Any) -> tuple[Any, Any]:
        request.upload_handlers = ImmutableList(
            request.upload_handlers, warning="The upload has already been parsed."
        )
        return OriginalNameParser(
            meta, post_data, request.upload_handlers, request.encoding
        ).parse()

    # The request's own parser replaced, for this request only (a function, not a method).
    request.parse_file_upload = parse  # type: ignore[method-assign,assignment]


def streams_uploads(view: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a view that sets its own upload handler: middleware must not read its body first."""
    view.streams_uploads = True  # type: ignore[attr-defined]
    return view
