"""The operators' admin site: Django's, except that its own password change is a login attempt
too (accounts.forms.ThrottledPasswordChangeForm), so a stolen staff session cannot guess the
password there either."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import reverse

from accounts.forms import ThrottledPasswordChangeForm
from accounts.views import PasswordChangeView


class ThrottledAdminPasswordChangeForm(ThrottledPasswordChangeForm):
    required_css_class = "required"  # as the admin's own form marks its fields


class LoopAdminSite(admin.AdminSite):
    # Typed as what it returns, as Django's own does: the view's answer, a redirect once the
    # password is changed (django-stubs says TemplateResponse, the form's page only).
    def password_change(  # type: ignore[override]
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponseBase:
        """Django's `AdminSite.password_change`, with the form that counts wrong old passwords."""
        defaults: dict[str, Any] = {
            "form_class": ThrottledAdminPasswordChangeForm,
            "success_url": reverse("admin:password_change_done", current_app=self.name),
            "extra_context": {**self.each_context(request), **(extra_context or {})},
        }
        if self.password_change_template is not None:
            defaults["template_name"] = self.password_change_template
        request.current_app = self.name
        return PasswordChangeView.as_view(**defaults)(request)
