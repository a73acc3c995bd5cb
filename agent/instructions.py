"""What a person asks of Loop's answers, kept: their own instructions ("how to answer me") and each
conversation's; core.instructions says how a run's system prompt carries them. The one form
both pages use, with the one message for instructions too long."""

from django import forms
from django.contrib.auth.models import User

from agent.models import Conversation, PersonalInstructions
from agent.selectors import conversations_for
from core.instructions import INSTRUCTIONS_CHARS

TOO_LONG = (
    "Not saved: these instructions are %(show_value)s characters long, and at most "
    "%(limit_value)s fit. Shorten them, then save again."
)


class InstructionsForm(forms.Form):
    instructions = forms.CharField(
        required=False,
        max_length=INSTRUCTIONS_CHARS,
        widget=forms.Textarea(attrs={"rows": 6}),
        error_messages={"max_length": TOO_LONG},
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # No maxlength in the page: a browser would cut a long paste without a word, where the
        # server says how long it is and keeps it for shortening.
        self.fields["instructions"].widget.attrs.pop("maxlength", None)


def personal_instructions_of(user: User) -> str:
    found = PersonalInstructions.objects.filter(user=user).values_list("text", flat=True)
    return found.first() or ""


def set_personal_instructions(user: User, text: str) -> None:
    """Runs the person starts from now on read these; runs already started keep what they read."""
    PersonalInstructions.objects.update_or_create(user=user, defaults={"text": text})


def set_conversation_instructions(user: User, conversation_id: int, text: str) -> Conversation:
    """The instructions of one of the person's own conversations (another's does not exist
    here: Conversation.DoesNotExist)."""
    conversation = conversations_for(user).get(pk=conversation_id)
    conversation.instructions = text
    conversation.save(update_fields=["instructions", "updated_at"])
    return conversation
