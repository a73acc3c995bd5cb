"""A person's notifications (/settings/notifications/): what they are mailed about, and, where
the operator allows (LOOP_PERSON_WEBHOOKS), webhooks of their own. A webhook's secret is shown
once, on the page that answers its making or renewal, never stored in a cookie or a message."""

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from notifications import webhooks
from notifications.models import Endpoint, EventType, MailChoice, new_secret
from workspace.requests import SignedInRequest

RECENT_DELIVERIES = 10
PERSON_EVENTS = [choice for choice in EventType.choices if choice[0] != EventType.TEST]


class MailChoiceForm(forms.ModelForm[MailChoice]):
    class Meta:
        model = MailChoice
        fields = ("waiting", "failed", "long_run")


class EndpointForm(forms.Form):
    url = forms.URLField(max_length=2000, label="URL", assume_scheme="https")
    events = forms.MultipleChoiceField(
        choices=PERSON_EVENTS,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None checked: all of them.",
    )

    def clean_url(self) -> str:
        url: str = self.cleaned_data["url"]
        try:
            webhooks.check_person_url(url)
        except webhooks.Refused as refused:
            raise forms.ValidationError(str(refused)) from None
        return url


@require_http_methods(["GET", "POST"])
def notification_settings(request: SignedInRequest) -> HttpResponse:
    choice = MailChoice.objects.filter(user=request.user).first() or MailChoice(user=request.user)
    form = MailChoiceForm(request.POST if request.method == "POST" else None, instance=choice)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Saved: you are mailed about these from now on.")
        return redirect("notification_settings")
    return page(request, form=form)


def page(
    request: SignedInRequest,
    *,
    form: MailChoiceForm | None = None,
    endpoint_form: EndpointForm | None = None,
    shown: Endpoint | None = None,
    status: int = 200,
) -> HttpResponse:
    """The page; `shown`: the endpoint whose new secret it shows, this once."""
    if form is None:
        choice = MailChoice.objects.filter(user=request.user).first()
        form = MailChoiceForm(instance=choice or MailChoice(user=request.user))
    endpoints = Endpoint.objects.filter(owner=request.user).order_by("created_at")
    context = {
        "form": form,
        "email": request.user.email,
        "person_webhooks": settings.LOOP_PERSON_WEBHOOKS,
        "endpoints": [(endpoint, recent(endpoint)) for endpoint in endpoints],
        "endpoint_form": endpoint_form or EndpointForm(),
        "shown": shown,
        "long_run_seconds": settings.LOOP_NOTIFY_LONG_RUN_SECONDS,
    }
    return render(request, "notifications/settings.html", context, status=status)


def recent(endpoint: Endpoint) -> list[object]:
    return list(endpoint.deliveries.prefetch_related("attempts")[:RECENT_DELIVERIES])


def own_endpoint(request: SignedInRequest, endpoint_id: int) -> Endpoint:
    """The person's endpoint; another's, or any while people's webhooks are off, does not exist."""
    if not settings.LOOP_PERSON_WEBHOOKS:
        raise Http404("This site does not allow webhooks of your own.")
    return get_object_or_404(Endpoint, pk=endpoint_id, owner=request.user)


@require_POST
def add_endpoint(request: SignedInRequest) -> HttpResponse:
    if not settings.LOOP_PERSON_WEBHOOKS:
        raise Http404("This site does not allow webhooks of your own.")
    endpoint_form = EndpointForm(request.POST)
    if not endpoint_form.is_valid():
        return page(request, endpoint_form=endpoint_form, status=400)
    endpoint = Endpoint.objects.create(
        owner=request.user,
        url=endpoint_form.cleaned_data["url"],
        events=endpoint_form.cleaned_data["events"],
    )
    return page(request, shown=endpoint, status=201)


@require_POST
def renew_secret(request: SignedInRequest, endpoint_id: int) -> HttpResponse:
    endpoint = own_endpoint(request, endpoint_id)
    endpoint.secret = new_secret()
    endpoint.save(update_fields=["secret"])
    return page(request, shown=endpoint)


@require_POST
def send_test(request: SignedInRequest, endpoint_id: int) -> HttpResponse:
    endpoint = own_endpoint(request, endpoint_id)
    webhooks.send_test(endpoint)
    messages.success(request, f"A test is on its way to {endpoint.url}; its delivery shows below.")
    return redirect("notification_settings")


@require_POST
def delete_endpoint(request: SignedInRequest, endpoint_id: int) -> HttpResponse:
    endpoint = own_endpoint(request, endpoint_id)
    endpoint.delete()
    messages.success(request, f"Deleted: {endpoint.url} is told of nothing more.")
    return redirect("notification_settings")
