"""A person's API keys page (/settings/keys/): their keys with their scopes, expiry, last use and
state, a form to make one, and Revoke. A new key's secret is in the one response that made it,
never stored (not in the session, not in a message) and so never shown again; the page after it
shows the prefix alone. The page acts for the signed-in person (their session): a key is never a
login here, and another person's key does not exist for them."""

from dataclasses import dataclass
from datetime import datetime, time, timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from api.keys import NAME_CHARS, InvalidKey, NewKey, create_key, keys_of, revoke
from api.models import PREFIX_CHARS, ApiKey, Scope
from workspace.requests import SignedInRequest

PAGE = "api_pages:keys"
NEVER, ON_DATE = "never", "date"
EXPIRY_DAYS = (30, 90, 365)
EXPIRY_CHOICES = [
    (NEVER, "Never"),
    *((str(days), f"In {days} days") for days in EXPIRY_DAYS),
    (ON_DATE, "On a date"),
]
DEFAULT_SCOPES = [Scope.READ.value, Scope.RUN.value]


class NewKeyForm(forms.Form):
    """What a person chooses for a key: a name to tell it apart, its scopes, when it expires."""

    name = forms.CharField(max_length=NAME_CHARS, strip=True)
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=DEFAULT_SCOPES,
        error_messages={"required": "Give the key at least one scope."},
    )
    expiry = forms.ChoiceField(
        choices=EXPIRY_CHOICES, widget=forms.RadioSelect, initial=NEVER, label="Expires"
    )
    expires_on = forms.DateField(
        required=False,
        label="Expiry date",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="With “On a date”: the key stops working at the start of that day.",
    )

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        if cleaned.get("expiry") == ON_DATE:
            day = cleaned.get("expires_on")
            if day is None:
                self.add_error("expires_on", "Pick the day the key stops working.")
            elif day <= timezone.localdate():
                self.add_error("expires_on", "Pick a day after today.")
        return cleaned

    def expires_at(self) -> datetime | None:
        """When the chosen expiry falls, in the site's time zone; None for never."""
        expiry = self.cleaned_data["expiry"]
        if expiry == NEVER:
            return None
        if expiry == ON_DATE:
            day = self.cleaned_data["expires_on"]
            return timezone.make_aware(datetime.combine(day, time.min))
        return timezone.now() + timedelta(days=int(expiry))


class RevokeForm(forms.Form):
    key = forms.CharField(max_length=PREFIX_CHARS)  # the key's prefix


@dataclass(frozen=True)
class KeyRow:
    key: ApiKey
    scopes: list[tuple[str, str]]  # each scope with what it allows


def rows_of(person: User) -> list[KeyRow]:
    labels = dict(Scope.choices)
    return [
        KeyRow(key, [(scope, labels.get(scope, "")) for scope in key.scopes])
        for key in keys_of(person)
    ]


def keys_page(
    request: SignedInRequest, form: NewKeyForm, new: NewKey | None = None, status: int = 200
) -> HttpResponse:
    context = {
        "rows": rows_of(request.user),
        "form": form,
        "new": new,
    }
    return render(request, "api/keys.html", context, status=status)


@never_cache  # the response that shows a new key must not be kept by any cache
@require_http_methods(["GET", "POST"])
def keys(request: SignedInRequest) -> HttpResponse:
    """The page; a POST makes a key and shows its secret in this response alone (a reload
    of the page, a GET, shows its prefix only)."""
    if request.method != "POST":
        return keys_page(request, NewKeyForm())
    form = NewKeyForm(request.POST)
    if not form.is_valid():
        return keys_page(request, form, status=400)
    try:
        new = create_key(
            request.user,
            form.cleaned_data["name"],
            form.cleaned_data["scopes"],
            form.expires_at(),
        )
    except InvalidKey as refused:
        form.add_error(None, str(refused))
        return keys_page(request, form, status=400)
    return keys_page(request, NewKeyForm(), new=new)


@require_POST
def revoke_key(request: SignedInRequest) -> HttpResponse:
    """Revoke one of the person's own keys: it stops working at the next request. Another
    person's key, or none of that prefix, does not exist here."""
    form = RevokeForm(request.POST)
    if not form.is_valid():
        raise Http404("No such key.")
    try:
        key = revoke(keys_of(request.user), form.cleaned_data["key"], by=request.user)
    except ApiKey.DoesNotExist:
        raise Http404("No such key.") from None
    messages.success(request, f"Revoked {key.label}: programs using it are refused from now on.")
    return redirect(PAGE)
