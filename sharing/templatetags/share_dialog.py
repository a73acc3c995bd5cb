"""`{% share_form as form %}`: the chat header's Share dialog's form, with the person's groups,
drawn with the page (no request of its own: the dialog opens without a script)."""

from typing import Any

from django import template

from sharing.views import ShareForm

register = template.Library()


@register.simple_tag(takes_context=True)
def share_form(context: dict[str, Any]) -> ShareForm:
    return ShareForm(context["request"].user, auto_id="share-%s")
