"""The provider sign-in's two addresses, at /oidc/, which exist only when LOOP_OIDC_ISSUER is
set. The names are mozilla-django-oidc's, which its code reverses."""

from django.conf import settings
from django.urls import URLPattern, path

from identity.views import SignInCallback, SignInStart

urlpatterns: list[URLPattern] = (
    [
        path("authenticate/", SignInStart.as_view(), name="oidc_authentication_init"),
        path("callback/", SignInCallback.as_view(), name="oidc_authentication_callback"),
    ]
    if settings.LOOP_OIDC_ISSUER
    else []
)
