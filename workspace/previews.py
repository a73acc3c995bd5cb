"""What the Files panel shows of a file, by its kind: Markdown rendered, code highlighted, an
image shown, a CSV as a table of its first rows, a PDF offered as a download, any other text as
text. HTML and SVG are code here: shown as source, never served as a page or an image, where
their scripts would run as the person.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path, PurePosixPath

from workspace import browse
from workspace.images import why_not_shown
from workspace.markup import highlighted_file, lexer_for, markdown

TABLE_ROWS = 50  # a table's first rows: enough to see what it holds, the rest is a download
TABLE_COLUMNS = 30
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TABLE_DELIMITERS = {".csv": ",", ".tsv": "\t"}
# A browser shows these in an <img> and runs nothing in them; each is known by its first bytes,
# so a file named .png that is something else is not served as an image.
IMAGE_SIGNATURES = {
    ".png": ("image/png", (b"\x89PNG\r\n\x1a\n",)),
    ".jpg": ("image/jpeg", (b"\xff\xd8\xff",)),
    ".jpeg": ("image/jpeg", (b"\xff\xd8\xff",)),
    ".gif": ("image/gif", (b"GIF87a", b"GIF89a")),
    ".webp": ("image/webp", (b"RIFF",)),
}
SIGNATURE_BYTES = 12


class PreviewKind(StrEnum):
    MARKDOWN = "markdown"
    CODE = "code"
    IMAGE = "image"
    TABLE = "table"
    PDF = "pdf"
    TEXT = "text"


@dataclass(frozen=True)
class Preview:
    """A file as the panel shows it: its kind, and what of it the template draws (HTML already
    sanitised, or rows to escape), with the text part it came from (size, cut) when it is text."""

    kind: PreviewKind
    path: str
    size: int
    html: str = ""
    rows: list[list[str]] = field(default_factory=list)
    more_rows: bool = False
    part: browse.TextPart | None = None


def kind_of(name: str) -> PreviewKind:
    """The kind of preview a file's name asks for."""
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        return PreviewKind.MARKDOWN
    if suffix in TABLE_DELIMITERS:
        return PreviewKind.TABLE
    if suffix in IMAGE_SIGNATURES:
        return PreviewKind.IMAGE
    if suffix == ".pdf":
        return PreviewKind.PDF
    return PreviewKind.TEXT if lexer_for(name) is None else PreviewKind.CODE


def preview(workspace: Path, path: str) -> Preview:
    """The preview of a file of the workspace, confined as every read of the panel is
    (browse.BrowseError for what it refuses: another person's file does not exist)."""
    kind = kind_of(path)
    path = "/".join(browse.file_components(path))
    if kind is PreviewKind.IMAGE:
        download, _ = open_image(workspace, path)
        download.file.close()
        return Preview(kind, path, download.size)
    if kind is PreviewKind.PDF:
        download = browse.open_download(workspace, path)
        download.file.close()
        return Preview(kind, path, download.size)
    part = browse.open_text(workspace, path)
    shown = Preview(kind, part.path, part.size, part=part)
    if kind is PreviewKind.MARKDOWN:
        return replace(shown, html=markdown(part.text))
    if kind is PreviewKind.CODE:
        return replace(shown, html=highlighted_file(part.text, part.path))
    if kind is PreviewKind.TABLE:
        try:
            rows, more = first_rows(part.text, TABLE_DELIMITERS[PurePosixPath(path).suffix.lower()])
        except csv.Error:  # not a table after all (a NUL, a field past csv's limit): its text
            return replace(shown, kind=PreviewKind.TEXT)
        return replace(shown, rows=rows, more_rows=more or part.cut)
    return shown


def first_rows(text: str, delimiter: str) -> tuple[list[list[str]], bool]:
    """The first TABLE_ROWS rows (the header among them), each of its first TABLE_COLUMNS
    cells, and whether there are more rows."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[list[str]] = []
    for row in reader:
        if len(rows) == TABLE_ROWS:
            return rows, True
        rows.append(row[:TABLE_COLUMNS])
    return rows, False


def image_type(name: str, head: bytes) -> str | None:
    """The image's content type, if its first bytes are what its name says (None if not)."""
    content_type, signatures = IMAGE_SIGNATURES.get(PurePosixPath(name).suffix.lower(), ("", ()))
    webp = content_type != "image/webp" or head[8:12] == b"WEBP"
    return content_type if webp and any(head.startswith(s) for s in signatures) else None


class NotShownAsImage(browse.BrowseError):
    """A file named as an image that is not one (its first bytes say otherwise), or one too
    large to show (workspace.images): a download, never an <img>."""


def open_image(workspace: Path, path: str) -> tuple[browse.Download, str]:
    """The file opened for serving as an image, with its content type, if it is one (its name
    and first bytes agree) of a size Loop shows; else NotShownAsImage. The caller closes the
    file."""
    download = browse.open_download(workspace, path)
    content_type = image_type(download.name, download.file.read(SIGNATURE_BYTES))
    if content_type is None:
        unshown: str | None = "it is not the image its name says"
    else:
        unshown = why_not_shown(download.file)
    if content_type is None or unshown is not None:
        download.file.close()
        raise NotShownAsImage(f"{path} is not shown here: {unshown}. Download it.")
    download.file.seek(0)
    return download, content_type
