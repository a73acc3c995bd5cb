"""What a notification may say of a run: its number, status and the start of its task (as long
as a title), and where to see it. Nothing else of the task, nor of its answers or tool calls:
mail and webhooks leave the site."""

from django.conf import settings
from django.urls import reverse

from agent.models import AgentRun
from agent.runs import title_from


def site_link(path: str) -> str:
    return f"{settings.LOOP_SITE_URL}{path}"


def page_of(run: AgentRun) -> str:
    """Where the run's person sees it: its conversation, or, for a run of `runagent`'s (no
    conversation), the calls that wait for them."""
    if run.conversation_id is None:
        return site_link(reverse("chat:waiting"))
    return site_link(reverse("chat:conversation", args=[run.conversation_id]))


def run_data(run: AgentRun, status: str) -> dict[str, object]:
    """The `data` of a webhook about the run, its `status` as the event says (the run's row, as
    its worker holds it, may be a step behind)."""
    return {
        "run": run.pk,
        "conversation": run.conversation_id,
        "person": run.user.get_username(),
        "status": status,
        "title": title_from(run.task),
        "model": run.model,
        "links": {"page": page_of(run), "api": site_link(reverse("api:run", args=[run.pk]))},
    }
