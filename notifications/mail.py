"""Mail to a run's person, when they asked for it (notifications.models.MailChoice): a call
waits for their decision, a run they left failed, a long run ended. At most one mail a run, none
while they have its page open; plain text, a link to the run, nothing of the task beyond its
title. Sent by a job (notifications/tasks.py), never in the run's thread."""

from django.core.mail import EmailMessage
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse

from agent.models import AgentRun
from agent.runs import title_from
from notifications.links import page_of, site_link
from notifications.models import MailChoice, MailReason, RunMail
from notifications.presence import on_the_page

SUBJECTS = {
    MailReason.WAITING: "Loop waits for your decision: {title}",
    MailReason.FAILED: "Your run failed: {title}",
    MailReason.LONG_RUN: "Your run ended: {title}",
}


def wants_mail(user_id: int, reason: MailReason) -> bool:
    choice = MailChoice.objects.filter(user_id=user_id).first()
    return choice is not None and choice.wants(reason)


def mail_run(run_id: int, reason: MailReason) -> bool:
    """Mail the run's person about it, if they still want it, are not on its page, have an
    address, and the run had no mail yet. The run's mail row and the sending are one
    transaction: a send that fails leaves the run unmailed, for the job's retry. Says whether
    a mail went."""
    run = AgentRun.objects.select_related("user").filter(pk=run_id).first()
    if run is None or not run.user.email or not wants_mail(run.user_id, reason):
        return False
    if on_the_page(run.user_id, run.pk):
        return False
    with transaction.atomic():
        _, new = RunMail.objects.get_or_create(
            run_id=run.pk, defaults={"user": run.user, "reason": reason}
        )
        if not new:
            return False
        message(run, reason).send()
    return True


def message(run: AgentRun, reason: MailReason) -> EmailMessage:
    title = title_from(run.task)
    text = render_to_string(
        "notifications/run_mail.txt",
        {
            "username": run.user.get_username(),
            "title": title,
            "reason": reason.value,
            "link": page_of(run),
            "settings_link": site_link(reverse("notification_settings")),
        },
    )
    subject = SUBJECTS[reason].format(title=title)
    return EmailMessage(subject, text, to=[run.user.email])
