"""/api/v1/files: a person's workspace as the Files panel shows it (list, upload, download,
delete), through the panel's own code (workspace.browse, workspace.uploads), so the same paths
are refused with the same words: '..', an absolute path, a NUL or control character, a symlink
(never followed), and anything outside the key's person's own workspace, which is 404 as a file
that never was.

The refusals, as codes: 400 `bad_path` (a path or a name the rules refuse), 404 `not_found`,
409 `exists` (an upload's name is taken and `on_clash` was not given) or `folder_not_empty`
(delete with `contents`), 413 `too_large` (a file past LOOP_UPLOAD_MAX_BYTES) or
`too_many_files` (past LOOP_UPLOAD_MAX_FILES in one request), 507 `quota_exceeded` (the
workspace quota has no room: 507 Insufficient Storage, apart from 413, since sending less does
not help, deleting does), 400 `invalid_upload` (a body that is not multipart, a part not named
`file`, no file at all)."""

from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from django.core.exceptions import BadRequest, SuspiciousOperation
from django.http import FileResponse, HttpRequest
from django.http.multipartparser import MultiPartParserError
from ninja import Field, Query, Router, Schema, Status

from api.auth import FILES, person_of
from api.errors import ApiError, refusals
from workspace import browse
from workspace.directory import workspace_of
from workspace.paths import MAX_PATH_CHARS
from workspace.uploads import FIELD, Cause, WorkspaceUploadHandler, stream_into_workspace

router = Router(tags=["files"])
REFUSED = refusals(400, 404)
UPLOAD_REFUSED = refusals(400, 404, 409, 413, 507)
BINARY_TYPE = "application/octet-stream"

# How each cause of a refused part is answered.
CAUSES: dict[Cause, tuple[int, str]] = {
    Cause.FIELD: (400, "invalid_upload"),
    Cause.NAME: (400, "bad_path"),
    Cause.COUNT: (413, "too_many_files"),
    Cause.SIZE: (413, "too_large"),
    Cause.QUOTA: (507, "quota_exceeded"),
    Cause.DISK: (507, "not_stored"),
}


class FileOut(Schema):
    name: str
    path: str = Field(description="From the workspace's root, '/'-separated; GET /files/{path}.")
    size: int = Field(description="In bytes; 0 for a folder.")
    modified: datetime
    is_folder: bool
    kind: str = Field(description="file, folder, symlink, fifo, socket, device or other.")


class FolderOut(Schema):
    path: str = Field(description="The folder listed; '' is the workspace's root.")
    total: int = Field(description="Entries in the folder; `entries` holds the newest 200.")
    entries: list[FileOut]


class FolderQuery(Schema):
    path: str = Field("", max_length=MAX_PATH_CHARS, description="A folder; '' is the root.")


class UploadQuery(FolderQuery):
    on_clash: Literal["replace", "keep"] | None = Field(
        None,
        description="When a file of that name exists: replace it, or keep both (the upload "
        "gets a new name). None: the clash is refused (409 `exists`).",
    )


class StoredOut(Schema):
    path: str = Field(description="Where it was stored (a new name when kept beside another).")
    size: int
    message: str


class RefusedOut(Schema):
    code: str
    message: str


class UploadOut(Schema):
    stored: list[StoredOut]
    refused: list[RefusedOut] = Field(
        description="Parts that were not stored, each with why (the others were)."
    )


class DeleteQuery(Schema):
    contents: int | None = Field(
        None,
        ge=0,
        description="To delete a folder holding entries: how many it holds (a first DELETE "
        "without it answers 409 `folder_not_empty` with the number), so no more is deleted "
        "than the program saw.",
    )


class DeletedOut(Schema):
    path: str
    message: str


UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        FIELD: {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "One part per file, each named `file`.",
                        }
                    },
                    "required": [FIELD],
                }
            }
        },
    }
}
DOWNLOAD: dict[str, Any] = {
    "responses": {
        "200": {
            "description": "The file's bytes, as an attachment.",
            "content": {BINARY_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        }
    }
}


def refused(error: browse.BrowseError) -> ApiError:
    """The panel's refusal, as the API's error: the same sentence, a stable code."""
    if isinstance(error, browse.NotFound):
        return ApiError(404, "not_found", error.message)
    if isinstance(error, browse.FolderNotEmpty):
        return ApiError(409, "folder_not_empty", error.message)
    if isinstance(error, browse.Clash):
        return ApiError(409, "exists", error.message)
    if isinstance(error, browse.OverQuota):
        return ApiError(507, "quota_exceeded", error.message)
    return ApiError(400, "bad_path", error.message)


def workspace(request: HttpRequest) -> Path:
    return workspace_of(person_of(request))


def file_out(entry: browse.Entry) -> FileOut:
    return FileOut(
        name=entry.name,
        path=entry.path,
        size=entry.size,
        modified=entry.modified,
        is_folder=entry.is_folder,
        kind=entry.kind.value,
    )


@router.get("/files", response={200: FolderOut, **REFUSED}, auth=FILES, url_name="files")
def list_folder(request: HttpRequest, query: Query[FolderQuery]) -> FolderOut:
    """A folder of your workspace, newest first (the Files panel's list)."""
    try:
        listing = browse.list_folder(workspace(request), query.path)
    except browse.BrowseError as error:
        raise refused(error) from None
    entries = [file_out(entry) for entry in listing.entries]
    return FolderOut(path=listing.folder, total=listing.total, entries=entries)


@router.post(
    "/files",
    response={201: UploadOut, **UPLOAD_REFUSED},
    auth=FILES,
    openapi_extra=UPLOAD_BODY,
)
def upload(request: HttpRequest, query: Query[UploadQuery]) -> Status[UploadOut]:
    """Upload one or more files (multipart, parts named `file`) into the folder `path`. Each
    part is streamed to disk and stored only when whole, under the Files panel's limits:
    LOOP_UPLOAD_MAX_BYTES a file, LOOP_UPLOAD_MAX_FILES a request, the workspace quota. If
    none is stored, the answer is the first refusal; otherwise 201, with each part refused.
    Codes: 400 `bad_path` or `invalid_upload`, 404 `not_found` (no such folder), 409 `exists`,
    413 `too_large` or `too_many_files`, 507 `quota_exceeded` (delete files to make room)."""
    handler = WorkspaceUploadHandler(workspace(request))
    stream_into_workspace(request, handler)
    try:
        read_parts(request)
        return Status(201, store(handler, query))
    finally:
        handler.discard()  # whatever was not named: refused, or over a limit


def read_parts(request: HttpRequest) -> None:
    """Parse the body through the workspace's handler (each part straight to disk)."""
    if not (request.content_type or "").startswith("multipart/form-data"):
        raise ApiError(
            400,
            "invalid_upload",
            f"Send the files as multipart/form-data, each part named {FIELD!r}.",
        )
    try:
        request.POST  # noqa: B018 (parsed here, through the handler, once)
    except (BadRequest, SuspiciousOperation, MultiPartParserError) as error:
        raise ApiError(400, "invalid_upload", f"The upload could not be read: {error}") from None
    except browse.BrowseError as error:
        raise refused(error) from None


def store(handler: WorkspaceUploadHandler, query: UploadQuery) -> UploadOut:
    """Name each complete part in the folder, as the panel does; what is refused is listed."""
    refusals = [
        (CAUSES[cause], message)
        for cause, message in zip(handler.causes, handler.refusals, strict=True)
    ]
    stored: list[StoredOut] = []
    for streamed in handler.complete:
        try:
            done = browse.store_upload(
                streamed.incoming, query.path, streamed.name, query.on_clash or ""
            )
        except browse.BrowseError as error:
            answer = refused(error)
            refusals.append(((answer.status, answer.code), answer.message))
            continue
        stored.append(StoredOut(path=done.path, size=streamed.size, message=done.note))
    if not stored:
        (status, code), message = refusals[0] if refusals else ((400, "invalid_upload"), "")
        raise ApiError(status, code, message or f"No file was sent: send parts named {FIELD!r}.")
    return UploadOut(
        stored=stored,
        refused=[RefusedOut(code=code, message=message) for (_, code), message in refusals],
    )


@router.get("/files/{path:path}", response=REFUSED, auth=FILES, openapi_extra=DOWNLOAD)
def download(request: HttpRequest, path: str) -> FileResponse:
    """A file's bytes, as an attachment, never as a page (`X-Content-Type-Options: nosniff`)."""
    try:
        found = browse.open_download(workspace(request), path)
    except browse.BrowseError as error:
        raise refused(error) from None
    response = FileResponse(
        found.file, as_attachment=True, filename=found.name, content_type=BINARY_TYPE
    )
    response["Content-Length"] = str(found.size)
    response["X-Content-Type-Options"] = "nosniff"
    return response


@router.delete(
    "/files/{path:path}", response={200: DeletedOut, **refusals(400, 404, 409)}, auth=FILES
)
def delete(request: HttpRequest, path: str, query: Query[DeleteQuery]) -> DeletedOut:
    """Delete a file, a symlink (the link itself) or a folder: an empty one at once, one
    holding entries only with `contents`, the number it holds."""
    try:
        message = browse.delete(workspace(request), path, query.contents)
    except browse.BrowseError as error:
        raise refused(error) from None
    return DeletedOut(path=path, message=message)
