"""The Files panel: a person's workspace, listed, opened, downloaded, deleted and uploaded to.

Thin views over workspace.browse, which confines every path like the file tools do. A path names a
file in the requester's own workspace only, so another person's files do not exist here (404).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import BadRequest, SuspiciousOperation
from django.http import FileResponse, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_POST

from workspace import browse, previews
from workspace.directory import workspace_of
from workspace.paths import MAX_PATH_CHARS
from workspace.query_string import query_text
from workspace.quota import Quota, usage
from workspace.requests import SignedInRequest
from workspace.uploads import FIELD, WorkspaceUploadHandler, stream_into_workspace, streams_uploads

# Served as text/plain (never rendered: nosniff); anything else downloads as octet-stream.
TEXT_SUFFIXES = frozenset(
    [
        ".txt",
        ".csv",
        ".tsv",
        ".md",
        ".json",
        ".jsonl",
        ".py",
        ".log",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".sql",
        ".sh",
        ".rst",
    ]
)
TEXT_TYPE = "text/plain; charset=utf-8"
BINARY_TYPE = "application/octet-stream"
# An image opened on its own (its URL in the address bar) is a document: it may load nothing and
# run nothing.
IMAGE_POLICY = "default-src 'none'; sandbox"


def quota_context(user: User) -> dict[str, Any]:
    """How much of the workspace quota the person uses, for the page header
    (workspace/quota.html)."""
    quota = Quota.from_settings()
    used = usage(workspace_of(user))
    return {
        "used_bytes": used.bytes,
        "max_bytes": quota.max_bytes,
        "used_files": used.files,
        "max_files": quota.max_files,
        "percent": min(100, round(100 * used.bytes / quota.max_bytes)) if quota.max_bytes else 100,
    }


def folder_url(folder: str) -> str:
    base = reverse("files")
    return f"{base}?{urlencode({'dir': folder})}" if folder else base


def parent_of(path: str) -> str:
    parent = str(PurePosixPath(path).parent)
    return "" if parent == "." else parent


def panel(
    request: SignedInRequest,
    folder: str,
    *,
    notes: list[tuple[str, str]] | None = None,
    status: int = 200,
    confirm: browse.FolderNotEmpty | None = None,
) -> HttpResponse:
    """The panel for folder (the fragment alone for htmx), or its refusal with the reason;
    with confirm, the question whether to delete a folder and what it holds."""
    context: dict[str, Any] = {
        "notes": notes or [],
        "confirm": confirm,
        "quota": quota_context(request.user),
        "max_upload": settings.LOOP_UPLOAD_MAX_BYTES,
        "max_files": settings.LOOP_UPLOAD_MAX_FILES,
    }
    try:
        context["listing"] = browse.list_folder(workspace_of(request.user), folder)
    except browse.BrowseError as refused:
        context.update(error=refused.message, folder=folder)
        status = refused.status
    template = "workspace/files.html#panel" if request.htmx else "workspace/files.html"
    return render(request, template, context, status=status)


@require_GET
def files(request: SignedInRequest) -> HttpResponse:
    return panel(request, query_text(request, "dir", MAX_PATH_CHARS))


@require_GET
def quota(request: SignedInRequest) -> HttpResponse:
    """The quota line alone: the chat's sidebar asks for it again when a run ends, since a run
    may have written files."""
    return render(request, "workspace/quota.html", {"quota": quota_context(request.user)})


@require_GET
def view(request: SignedInRequest, path: str) -> HttpResponse:
    """A file previewed by its kind (workspace.previews), on its page or, for htmx, alone (in
    the tool card that wrote or read it): never served as a page of its own."""
    try:
        shown = previews.preview(workspace_of(request.user), path)
    except browse.BrowseError as refused:
        context = {
            "error": refused.message,
            "path": path,
            "folder": parent_of(path),
            "downloadable": not isinstance(refused, browse.NotFound),
        }
        return render(request, preview_template(request), context, status=refused.status)
    context = {"preview": shown, "path": shown.path, "folder": parent_of(shown.path)}
    return render(request, preview_template(request), context)


def preview_template(request: SignedInRequest) -> str:
    """The page, or for htmx (a tool card's preview) the preview alone."""
    return "workspace/file_view.html#preview" if request.htmx else "workspace/file_view.html"


@require_GET
def image(request: SignedInRequest, path: str) -> HttpResponseBase:
    """An image for a preview's <img>: served as what its first bytes prove it is, in a sandbox
    of its own, so that even opened on its own it can run nothing."""
    try:
        download, content_type = previews.open_image(workspace_of(request.user), path)
    except previews.NotShownAsImage as refused:
        return HttpResponse(refused.message, status=404, content_type=TEXT_TYPE)
    except browse.BrowseError as refused:
        return HttpResponse(refused.message, status=refused.status, content_type=TEXT_TYPE)
    response = FileResponse(download.file, content_type=content_type)
    response["Content-Length"] = str(download.size)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = IMAGE_POLICY
    return response


@require_GET
def raw(request: SignedInRequest, path: str) -> HttpResponseBase:
    """The file as a download: never rendered from this origin, whatever its name says."""
    try:
        download = browse.open_download(workspace_of(request.user), path)
    except browse.BrowseError as refused:
        return HttpResponse(refused.message, status=refused.status, content_type=TEXT_TYPE)
    suffix = PurePosixPath(download.name).suffix.lower()
    response = FileResponse(
        download.file,
        as_attachment=True,
        filename=download.name,
        content_type=TEXT_TYPE if suffix in TEXT_SUFFIXES else BINARY_TYPE,
    )
    response["Content-Length"] = str(download.size)
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_POST
def delete(request: SignedInRequest) -> HttpResponse:
    """Delete a file or a folder; a folder with entries only with `contents`, the number of
    entries it holds, which the first attempt answers (and the panel asks to confirm)."""
    path = request.POST.get("path", "")
    contents = request.POST.get("contents", "")
    try:
        count = int(contents) if contents else None
        note = browse.delete(workspace_of(request.user), path, count)
    except ValueError:
        refusal = f"contents must be a number of entries, not {contents!r}."
        return answer(request, parent_of(path), refused=[refusal])
    except browse.FolderNotEmpty as asked:
        if "application/json" in request.headers.get("Accept", ""):
            body = {"done": [], "refused": [asked.message], "contents": asked.contents}
            return JsonResponse(body, status=asked.status)
        # Asked on the page itself, as a redirect's message could carry no form.
        notes = [("error", asked.message)]
        return panel(request, parent_of(path), notes=notes, status=asked.status, confirm=asked)
    except browse.BrowseError as refused:
        return answer(request, parent_of(path), refused=[refused.message], status=refused.status)
    return answer(request, parent_of(path), done=[note])


def answer(
    request: SignedInRequest,
    folder: str,
    *,
    done: list[str] | None = None,
    refused: list[str] | None = None,
    status: int = 400,
    stored: list[str] | None = None,
) -> HttpResponse:
    """What a change answers: JSON when asked, the panel fragment for htmx, else a redirect
    back to the folder with a message per file. `status` is for when something was refused;
    `stored`, the paths an upload stored (in JSON, for the chat's attach to name them)."""
    done, refused = done or [], refused or []
    notes = [("success", note) for note in done] + [("error", note) for note in refused]
    if "application/json" in request.headers.get("Accept", ""):
        body = {"done": done, "refused": refused}
        if stored is not None:
            body["stored"] = stored
        return JsonResponse(body, status=status if refused else 200)
    if request.htmx:
        return panel(request, folder, notes=notes)
    for level, note in notes:
        messages.add_message(
            request, messages.SUCCESS if level == "success" else messages.ERROR, note
        )
    return redirect(folder_url(folder))


@streams_uploads
@csrf_exempt  # the CSRF check reads the form, and the form must be read through the handler
@require_POST
def upload(request: SignedInRequest) -> HttpResponse:
    """Store one or several parts named `file` in the folder `dir`: each part is streamed to
    disk as it arrives and named only when whole, the CSRF token checked and the quota met."""
    handler = WorkspaceUploadHandler(workspace_of(request.user))
    stream_into_workspace(request, handler)
    try:
        try:
            request.POST  # noqa: B018 (parsed here, through the handler, once)
        except (BadRequest, SuspiciousOperation, MultiPartParserError) as error:
            return HttpResponse(f"The upload could not be read: {error}\n", status=400)
        except browse.BrowseError as refused:
            return HttpResponse(refused.message, status=refused.status, content_type=TEXT_TYPE)
        return store(request, handler)
    finally:
        handler.discard()  # whatever was not named: refused, over a limit, or a bad CSRF token


@csrf_protect
def store(request: SignedInRequest, handler: WorkspaceUploadHandler) -> HttpResponse:
    folder = request.POST.get("dir", "")
    on_clash = request.POST.get("on_clash", "")
    done, refused, paths = [], list(handler.refusals), []
    statuses = {400} if refused else set()
    for streamed in handler.complete:
        try:
            stored = browse.store_upload(streamed.incoming, folder, streamed.name, on_clash)
            done.append(stored.note)
            paths.append(stored.path)
        except browse.BrowseError as refusal:
            ask = (
                " Choose which below, and upload it again."
                if isinstance(refusal, browse.Clash)
                else ""
            )
            refused.append(refusal.message + ask)
            statuses.add(refusal.status)
    if not handler.complete and not refused:
        refused.append(f"No file was sent: choose one, or send parts named {FIELD!r}.")
    # One status when every refusal had the same (409: all clashes, 404: no such folder).
    status = statuses.pop() if len(statuses) == 1 else 400
    return answer(request, folder, done=done, refused=refused, status=status, stored=paths)
