"""Sharing's pages: the chat header's Share dialog (its form and the link it makes), the shared
page and its files (/shared/<token>/), and Settings → Shared links. Thin adapters over
sharing/links.py."""

from pathlib import PurePosixPath
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from agent import selectors
from sharing import links
from sharing.models import SharedFile, SharedLink
from sharing.snapshot import shown_turns
from workspace.requests import SignedInRequest
from workspace.views import BINARY_TYPE, TEXT_SUFFIXES, TEXT_TYPE

SITE = "site"
GROUP_PREFIX = "group:"


class ShareForm(forms.Form):
    """Who may open the link (everyone signed in, or one of the person's groups) and whether
    its files go with it."""

    audience = forms.ChoiceField(widget=forms.RadioSelect, initial=SITE)
    include_files = forms.BooleanField(required=False)

    def __init__(self, person: User, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(SITE, "Everyone signed in to this site")]
        choices += [
            (f"{GROUP_PREFIX}{g.pk}", f"The group {g.name}") for g in links.groups_of(person)
        ]
        audience = self.fields["audience"]
        if isinstance(audience, forms.ChoiceField):  # always: declared above
            audience.choices = choices
        audience.error_messages["invalid_choice"] = (
            "Pick who may open the link: everyone signed in, or one of your groups."
        )

    def group_id(self) -> int | None:
        audience = str(self.cleaned_data["audience"])
        return int(audience.removeprefix(GROUP_PREFIX)) if audience != SITE else None


@never_cache  # the answer that shows a new link's token must not be kept by any cache
@require_POST
def share(request: SignedInRequest, conversation_id: int) -> HttpResponse:
    """Make a link: with htmx, the dialog's result (the link and its Copy button, or why not);
    without, a page of its own."""
    conversation = get_object_or_404(selectors.conversations_for(request.user), pk=conversation_id)
    form = ShareForm(request.user, request.POST)
    error, new = "", None
    if not form.is_valid():
        error = " ".join(str(message) for message in form.errors.get("audience", []))
    else:
        try:
            new = links.share(
                request.user,
                conversation.pk,
                group_id=form.group_id(),
                include_files=form.cleaned_data["include_files"],
            )
        except links.ShareRefused as refused:
            error = str(refused)
    context = {
        "conversation": conversation,
        "error": error,
        "new": new,
        "url": request.build_absolute_uri(reverse("sharing:shared", args=[new.token]))
        if new
        else "",
    }
    if request.htmx:  # htmx swaps a 200 only: the refusal is said in the dialog
        return render(request, "sharing/share.html#result", context)
    return render(request, "sharing/created.html", context, status=400 if error else 200)


@require_GET
def shared(request: SignedInRequest, token: str) -> HttpResponse:
    """The shared page: the copy alone, read-only, for the link's audience; audited."""
    try:
        link = links.opened(token, request.user)
    except links.NotShared:
        raise Http404("No such shared conversation.") from None
    except links.Revoked as revoked:
        return render(request, "sharing/revoked.html", {"link": revoked.link}, status=410)
    links.record_view(link, request.user)
    context = {
        "link": link,
        "token": token,
        "snapshot": link.snapshot,
        "turns": shown_turns(link.snapshot),
    }
    return render(request, "sharing/shared.html", context)


@require_GET
def shared_file(request: SignedInRequest, token: str, path: str) -> HttpResponse:
    """One of a shared link's files, as its copy holds it: a download, never drawn by this
    origin (attachment, nosniff; the site's CSP on it as on every answer); audited."""
    try:
        link = links.opened(token, request.user)
    except links.NotShared:
        raise Http404("No such shared conversation.") from None
    except links.Revoked as revoked:
        return render(request, "sharing/revoked.html", {"link": revoked.link}, status=410)
    copy = SharedFile.objects.filter(link=link, path=path).first()
    if copy is None:
        raise Http404("This link shares no file of that name.")
    links.record_view(link, request.user, file=copy.path)
    name = PurePosixPath(copy.path).name
    suffix = PurePosixPath(name).suffix.lower()
    response = HttpResponse(
        bytes(copy.content), content_type=TEXT_TYPE if suffix in TEXT_SUFFIXES else BINARY_TYPE
    )
    response["Content-Disposition"] = content_disposition_header(True, name) or "attachment"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@never_cache
@require_GET
def shared_links(request: SignedInRequest) -> HttpResponse:
    """Settings → Shared links: the person's links, who may open each, its looks, Revoke."""
    return render(request, "sharing/links.html", {"links": links.links_of(request.user)})


@require_POST
def revoke(request: SignedInRequest) -> HttpResponse:
    """Revoke one of the person's links at once; another person's is not found (404)."""
    link_id = request.POST.get("link", "")
    if not (link_id.isascii() and link_id.isdecimal()):
        raise Http404("No such shared link.")
    try:
        link = links.revoke(
            SharedLink.objects.filter(sharer=request.user), int(link_id), by=request.user
        )
    except SharedLink.DoesNotExist:
        raise Http404("No such shared link.") from None
    messages.success(request, f"Revoked the link to “{link.title}”: it is refused from now on.")
    return redirect("shared_links")
