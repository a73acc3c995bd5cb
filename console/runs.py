"""The run pages: the run list and timeline, the event log, breaker trips, and usage per user and
day. Records are read-only here, bar Cancel and Continue; people are accounts/admin.py's."""

import json
from datetime import date, timedelta
from typing import Any, TypeAlias, TypedDict

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.postgres.search import SearchQuery
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.text import smart_split, unescape_string_literal
from django.views.decorators.http import require_POST
from django_stubs_ext import WithAnnotations

from agent.allowed import recorded_rights
from agent.models import (
    FINISHED,
    AgentRun,
    BreakerTrip,
    Rating,
    RunEvent,
    ToolExecution,
    run_search_vector,
)
from agent.runs import (
    InvalidTask,
    can_cancel_any_run,
    can_continue_any_run,
    cancel_run_as_operator,
    continue_run_as_operator,
)
from agent.transcripts import transcripts
from approvals.models import ApprovalRequest
from console import rollup, selectors, storage
from console.assistants import AssistantFilter
from console.widgets import (
    AuditAdmin,
    RunUserFilter,
    StepLinks,
    UserFilter,
    change_url,
    filter_link,
    halt_badge,
    link,
    list_url,
    pretty_json,
    run_badge,
    run_link,
    user_link,
)
from core.text import excerpt
from core.wording import resumed_text
from memory.models import Memory
from rights.described import described, lines_html, server_names
from workspace.requests import person_of

User = get_user_model()
# A day of a thousand active users is a thousand rows: the page shows them a hundred at a time.
USAGE_ROWS_PER_PAGE = 100
# The range shown until the operator picks one: the last week, today included.
USAGE_DEFAULT_DAYS = 7
# How much of a task, and of a failed run's error's first line, the run list shows.
TASK_WIDTH = 60
ERROR_WIDTH = 90
# A search that matches at most this many runs lists them by id (AgentRunAdmin.get_search_results).
SEARCH_IDS_UP_TO = 1000


def seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def span(value: float) -> str:
    """A run's length as short as it reads: "340 ms", "12.3 s", "12 min 5 s", "2 h 5 min"."""
    if value < 60:
        return seconds(value)
    minutes, second = divmod(round(value), 60)
    if minutes < 60:
        return f"{minutes} min {second} s"
    hours, minute = divmod(minutes, 60)
    return f"{hours} h {minute} min"


def prefix_query(search_term: str) -> str:
    """The search box's words as a `to_tsquery` text: each word, or "quoted phrase", matched as
    written or as the start of a longer word ('milk' finds milk and milkshake), all of them
    required. Each is a quoted tsquery term ('' and \\ escaped), so no character the operator
    types is an operator of the query; PostgreSQL's parser splits it into words as it split the
    runs' texts (`notes.txt` stays one word, `foo-bar` is foo-bar, foo and bar in a row). The text
    goes to PostgreSQL as a parameter, never into the SQL. Punctuation alone is no word: a term of
    none is dropped, and a query of none finds nothing. "" if there are no words at all."""
    terms = []
    for bit in smart_split(search_term.replace("\x00", " ")):
        if bit.startswith(('"', "'")) and bit[0] == bit[-1] and len(bit) > 1:
            bit = unescape_string_literal(bit)
        quoted = bit.replace("\\", "\\\\").replace("'", "''")
        if quoted.strip():
            terms.append(f"'{quoted}':*")
    return " & ".join(terms)


def transcript_response(transcript: object, filename: str) -> HttpResponse:
    response = HttpResponse(
        json.dumps(transcript, indent=2, ensure_ascii=False), content_type="application/json"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


class FailedCalls(TypedDict):
    failed_calls: int  # selectors.failed_tool_calls(), as the list annotates each run


# A string: the alias takes no arguments at run time on Python 3.11.
RunWithFailedCalls: TypeAlias = "WithAnnotations[AgentRun, FailedCalls]"


class FeedbackFilter(admin.SimpleListFilter):
    """The runs whose person rated the answer up, down, or not at all."""

    title = "feedback"
    parameter_name = "feedback"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [*Rating.choices, ("none", "None given")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "none":
            return queryset.filter(feedback__isnull=True)
        if self.value() in Rating.values:
            return queryset.filter(feedback__rating=self.value())
        return queryset


class AgentRunAdmin(AuditAdmin):
    # What a laptop's 1280 px hold whole: the status with its halt reason, the task with a
    # failure's first line, the calls with their failures, the model's own name. The rest
    # (iterations, tokens each way, every time) is on the run's page.
    list_display = (
        "id",
        "user_name",
        "task_and_error",
        "status_and_reason",
        "model_name",
        "calls",
        "tokens",
        "duration",
        "started",
    )
    list_display_links = ("id",)
    list_select_related = ("user",)
    list_filter = ("status", "halt_reason", "model", FeedbackFilter, UserFilter, AssistantFilter)
    date_hierarchy = "created_at"
    search_fields = ("task", "answer", "error")
    # Newest first by id: ids follow creation, and the primary key index serves the order.
    ordering = ("-id",)
    actions = ("cancel_runs", "continue_runs", "export_transcripts")
    change_form_template = "admin/agent/agentrun/change_form.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "user_page",
                    "task",
                    "status_badge",
                    "halt_reason_badge",
                    "answer",
                    "log_pruned_at",
                )
            },
        ),
        ("Feedback", {"fields": ("feedback_given",)}),
        (
            "Work",
            {
                "fields": (
                    ("provider", "model"),
                    ("iterations", "tool_calls", "failed_tool_calls"),
                    ("prompt_tokens", "completion_tokens", "tokens"),
                    "limits_json",
                )
            },
        ),
        (
            "Timings",
            {
                "fields": (
                    ("created_at", "started_at", "finished_at", "duration"),
                    "cancel_requested_at",
                )
            },
        ),
        ("Engine", {"fields": (("attempt", "worker", "job_id", "resumes"), "resume_rows")}),
        ("What it was allowed", {"fields": ("allowed_words",)}),
        ("Records", {"fields": ("records",)}),
    )
    readonly_fields = (
        "allowed_words",
        "user_page",
        "status_badge",
        "halt_reason_badge",
        "failed_tool_calls",
        "tokens",
        "duration",
        "limits_json",
        "records",
        "resume_rows",
        "feedback_given",
        "error_text",
        "started_with",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentRun]:
        runs: QuerySet[AgentRun] = super().get_queryset(request)
        return runs.annotate(failed_calls=selectors.failed_tool_calls())

    def get_fieldsets(self, request: HttpRequest, obj: AgentRun | None = None) -> Any:
        """A run that failed says why first thing, unfolded: the reason an operator opens it.
        A run a program started says with which key (its prefix, name and scopes)."""
        main, *rest = self.fieldsets
        if obj is not None and obj.api_key:
            name, options = main
            main = (name, options | {"fields": (*options["fields"], "started_with")})
        if obj is None or not obj.error:
            return (main, *rest)
        return (main, ("Error", {"fields": ("error_text",)}), *rest)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[AgentRun], search_term: str
    ) -> tuple[QuerySet[AgentRun], bool]:
        """Words and word starts in the task, answer or error (`search_fields`), found through
        the full-text index on them (agent_run_search_idx, migration agent.0012): Django's own
        search is `UPPER(col) LIKE '%term%'`, which no index on the embedded server serves, a
        scan of every run (seconds at 100,000). The list keeps its order, filters and pages.

        The matches are counted first, through the index. A few (a run's number, a rare word)
        are listed by id: otherwise the page's newest-first query, and the date bar's first and
        last run, walk the runs by id testing each one's words, and finding none among 100,000
        runs that way takes seconds (PostgreSQL guesses how many match a word start from its
        statistics, and for rare words it guesses many). Many are left to the words' filter:
        they come along the id order soon."""
        query = prefix_query(search_term)
        if not query:
            return queryset, False
        words = SearchQuery(query, search_type="raw", config="simple")
        matching = AgentRun.objects.alias(words=run_search_vector()).filter(words=words)
        if matching.count() > SEARCH_IDS_UP_TO:
            return queryset.alias(words=run_search_vector()).filter(words=words), False
        return queryset.filter(pk__in=list(matching.values_list("pk", flat=True))), False

    @admin.display(description="the person's feedback")
    def feedback_given(self, run: AgentRun) -> SafeString:
        feedback = getattr(run, "feedback", None)
        if feedback is None:
            return format_html('<span class="loop-none">{}</span>', "None given.")
        symbol = "👍" if feedback.rating == Rating.UP else "👎"
        said = feedback.comment or "(no comment)"
        when = feedback.updated_at.strftime("%Y-%m-%d %H:%M")
        return format_html("{} {} · {}<br>{}", symbol, feedback.get_rating_display(), when, said)

    @admin.display(description="started with API key")
    def started_with(self, run: AgentRun) -> SafeString:
        """The key a program started the run with, as the run recorded it (api/): read here
        as the run's own JSON, the console knowing nothing of the API's models."""
        return started_with_key(run.api_key)

    @admin.display(description="task")
    def task_and_error(self, run: AgentRun) -> SafeString:
        """The task, linked to the run; a failed run's error's first line beneath it."""
        task = link(change_url(run), excerpt(run.task, TASK_WIDTH))
        first = next(iter(run.error.strip().splitlines()), "")
        if not first:
            return task
        return format_html(
            '{}<span class="loop-error">{}</span>', task, excerpt(first, ERROR_WIDTH)
        )

    @admin.display(description="error")
    def error_text(self, run: AgentRun) -> SafeString:
        return format_html('<pre class="loop-text">{}</pre>', run.error)

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: AgentRun) -> SafeString:
        return run_badge(run.status)

    @admin.display(description="status", ordering="status")
    def status_and_reason(self, run: AgentRun) -> SafeString:
        if not run.halt_reason:
            return run_badge(run.status)
        return format_html("{} {}", run_badge(run.status), halt_badge(run.halt_reason))

    @admin.display(description="model", ordering="model")
    def model_name(self, run: AgentRun) -> SafeString:
        """The model's own name, its provider's and family's prefix in its title."""
        return format_html('<span title="{}">{}</span>', run.model, run.model.rpartition("/")[2])

    @admin.display(description="calls", ordering="tool_calls")
    def calls(self, run: RunWithFailedCalls) -> SafeString | int:
        if not run.failed_calls:
            return run.tool_calls
        return format_html(
            '{} <span class="loop-error">{} failed</span>', run.tool_calls, run.failed_calls
        )

    @admin.display(description="halt reason", ordering="halt_reason")
    def halt_reason_badge(self, run: AgentRun) -> SafeString:
        return halt_badge(run.halt_reason)

    @admin.display(description="failed calls")
    def failed_tool_calls(self, run: RunWithFailedCalls) -> int:
        return run.failed_calls

    @admin.display(description="tokens")
    def tokens(self, run: AgentRun) -> str:
        return f"{run.total_tokens:,}"

    @admin.display(description="duration")
    def duration(self, run: AgentRun) -> str:
        if run.started_at is None or run.finished_at is None:
            return "—"
        return span((run.finished_at - run.started_at).total_seconds())

    @admin.display(description="started", ordering="started_at")
    def started(self, run: AgentRun) -> SafeString:
        """Day and time, the year only when not this one; the whole moment in its title."""
        if run.started_at is None:
            return format_html('<span class="loop-none">{}</span>', "—")
        local = timezone.localtime(run.started_at)
        day = "%-d %b" if local.year == timezone.localdate().year else "%-d %b %Y"
        return format_html(
            '<time datetime="{}" title="{}">{}</time>',
            local.isoformat(),
            local.strftime("%Y-%m-%d %H:%M:%S %Z"),
            local.strftime(f"{day} %H:%M"),
        )

    @admin.display(description="user", ordering="user__username")
    def user_name(self, run: AgentRun) -> SafeString:
        return filter_link(self, run.user)

    @admin.display(description="user")
    def user_page(self, run: AgentRun) -> SafeString:
        return user_link(run.user)

    @admin.display(description="limits")
    def limits_json(self, run: AgentRun) -> SafeString:
        return pretty_json(run.limits)

    @admin.display(description="records")
    @admin.display(description="allowed")
    def allowed_words(self, run: AgentRun) -> SafeString:
        """What the run was allowed when it started (AgentRun.allowed); each attempt narrows it
        by its person's rights as they stand then (agent.allowed.allowed_now)."""
        if not run.allowed:
            return format_html(
                "{}", "Not recorded (a run from before groups decided): all the site offered."
            )
        rights = recorded_rights(run)
        lines = [
            *described(rights, server_names()),
            ("Long-term memory", "used" if rights.memory else "not used"),
        ]
        assistant = run.allowed.get("assistant")
        if assistant:
            named = f"{assistant.get('name', '')} (version {assistant.get('version')})"
            lines.append(("Assistant", named))
        return lines_html(lines)

    def records(self, run: AgentRun) -> SafeString:
        counted = (
            ("tool executions", ToolExecution, run.tool_executions.count()),
            ("breaker trips", BreakerTrip, run.breaker_trips.count()),
            ("events", RunEvent, run.events.count()),
        )
        links = [
            link(list_url(model, run__id__exact=run.pk), f"{n} {name}")
            for name, model, n in counted
        ]
        links.append(link(list_url(Memory, source_run_id=run.pk), "memories it stored"))
        links.append(link(list_url(ApprovalRequest, run__id__exact=run.pk), "calls it asked about"))
        links.append(link(list_url(AgentRun, user=run.user_id), f"{run.user}'s runs"))
        return format_html_join(" · ", "{}", ((item,) for item in links))

    @admin.display(description="went on")
    def resume_rows(self, run: AgentRun) -> SafeString:
        """Each time the run went on where it had stopped: its audit rows (agent.RunResume)."""
        rows = list(run.resumes_log.order_by("attempt"))
        if not rows:
            return format_html('<span class="loop-none">{}</span>', "never: one attempt")
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    row.attempt,
                    resumed_text(row.reason, row.by),
                    row.lost_worker or "—",
                    timezone.localtime(row.created_at).strftime("%Y-%m-%d %H:%M:%S"),
                )
                for row in rows
            ),
        )
        return format_html(
            '<table class="loop-table loop-resumes"><thead><tr><th>attempt</th><th>why</th>'
            "<th>worker lost</th><th>when</th></tr></thead><tbody>{}</tbody></table>",
            body,
        )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: AgentRun | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context |= {
                "timeline": selectors.timeline(obj),
                "stored_memories": Memory.objects.filter(source_run_id=obj.pk).defer("embedding"),
                "can_cancel": not obj.is_finished and can_cancel_any_run(person_of(request)),
                "can_continue": obj.can_continue
                and obj.owner_active
                and can_continue_any_run(person_of(request)),
            }
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("usage/", view(self.usage_view), name="agent_agentrun_usage"),
            path("storage/", view(self.storage_view), name="agent_agentrun_storage"),
            path(
                "<int:run_id>/transcript.json",
                view(self.transcript_view),
                name="agent_agentrun_transcript",
            ),
            path(
                "<int:run_id>/cancel/",
                view(require_POST(self.cancel_view)),
                name="agent_agentrun_cancel",
            ),
            path(
                "<int:run_id>/continue/",
                view(require_POST(self.continue_view)),
                name="agent_agentrun_continue",
            ),
            *super().get_urls(),
        ]

    def delete_model(self, request: HttpRequest, obj: AgentRun) -> None:
        """A superuser's delete: the usage rollup sums the run's day again at its next read."""
        super().delete_model(request, obj)
        rollup.forget_days([obj.created_at])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
        made = list(queryset.values_list("created_at", flat=True))
        super().delete_queryset(request, queryset)
        rollup.forget_days(made)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return can_cancel_any_run(person_of(request))

    @admin.action(description="Cancel selected runs", permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
        asked = 0
        for run in queryset.exclude(status__in=FINISHED):
            self.cancel(request, run)
            asked += 1
        finished = queryset.count() - asked
        message = f"Asked {asked} run{'s' if asked != 1 else ''} to stop."
        if finished:
            message += f" {finished} had already finished and stay as they ended."
        self.message_user(request, message, messages.SUCCESS if asked else messages.WARNING)

    def has_continue_permission(self, request: HttpRequest) -> bool:
        return can_continue_any_run(person_of(request))

    @admin.action(description="Continue the selected runs", permissions=["continue"])
    def continue_runs(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
        """Each run that can go on is queued again; each that cannot says why, by its id."""
        for run in queryset.order_by("pk"):
            self.go_on(request, run.pk)

    def go_on(self, request: HttpRequest, run_id: int) -> None:
        try:
            run = continue_run_as_operator(person_of(request), run_id)
        except InvalidTask as error:
            self.message_user(request, f"Run {run_id} was not continued: {error}", messages.WARNING)
            return
        self.log_change(request, run, "Continued by an operator.")
        self.message_user(request, f"Run {run.pk} continues: it is {run.status} again.")

    @admin.action(description="Export transcripts as JSON")
    def export_transcripts(
        self, request: HttpRequest, queryset: QuerySet[AgentRun]
    ) -> HttpResponse:
        return transcript_response(transcripts(queryset), "loop-transcripts.json")

    def cancel(self, request: HttpRequest, run: AgentRun) -> AgentRun:
        run = cancel_run_as_operator(person_of(request), run.pk)
        self.log_change(request, run, "Cancelled by an operator.")
        return run

    def cancel_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        run = get_object_or_404(AgentRun, pk=run_id)
        if run.is_finished:
            self.message_user(request, f"Run {run.pk} had already {run.status}.", messages.WARNING)
        else:
            run = self.cancel(request, run)
            self.message_user(request, f"Run {run.pk} was asked to stop; it is {run.status}.")
        return HttpResponseRedirect(reverse("admin:agent_agentrun_change", args=[run.pk]))

    def continue_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        if not self.has_continue_permission(request):
            raise PermissionDenied
        run = get_object_or_404(AgentRun, pk=run_id)
        self.go_on(request, run.pk)
        return HttpResponseRedirect(reverse("admin:agent_agentrun_change", args=[run.pk]))

    def transcript_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        found = transcripts(AgentRun.objects.filter(pk=run_id))
        if not found:
            raise Http404(f"No run {run_id}.")
        return transcript_response(found[0], f"loop-run-{run_id}.json")

    def usage_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = UsageRange(request.GET or None)
        since, until, user = form.chosen()
        if form.cut:
            messages.info(request, form.cut)
        rows = selectors.UsagePages(since, until, user.pk if user else None)
        page = Paginator(rows, USAGE_ROWS_PER_PAGE).get_page(request.GET.get("p"))
        others = request.GET.copy()
        others.pop("p", None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Usage",
            "opts": self.opts,
            "form": form,
            "since": since,
            "until": until,
            "chosen_user": user,
            "rows": page.object_list,
            "page": page,
            "query": others.urlencode(),
            "totals": rows.totals(),
        }
        # A range or user that does not parse is the request's fault: the page says which field,
        # and shows the last week meanwhile.
        status = 400 if form.errors else 200
        return TemplateResponse(request, "admin/agent/usage.html", context, status=status)

    def storage_view(self, request: HttpRequest) -> HttpResponse:
        """The store's size per table (console/storage.py), for operators who may see runs."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": "Storage",
            "opts": self.opts,
            "sizes": storage.table_sizes(),
            "database_size": storage.database_size(),
            "keep_events_days": max(settings.LOOP_KEEP_EVENTS_DAYS, 0),
            "keep_jobs_days": max(settings.LOOP_KEEP_JOBS_DAYS, 0),
        }
        return TemplateResponse(request, "admin/agent/storage.html", context)


def started_with_key(api_key: Any) -> SafeString:
    """`prefix… name (scopes)` of a run's recorded key; "—" for a run the chat started."""
    if not isinstance(api_key, dict) or not api_key.get("prefix"):
        return format_html('<span class="loop-none">{}</span>', "—")
    scopes = api_key.get("scopes") or []
    return format_html(
        "<code>{}…</code> {} ({})",
        api_key["prefix"],
        api_key.get("name", ""),
        ", ".join(str(scope) for scope in scopes) or "no scopes",
    )


class UsageRange(forms.Form):
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    # Chosen by following a user's link (from their page, or a name in the table).
    user = forms.ModelChoiceField(
        queryset=User.objects.all(), required=False, widget=forms.HiddenInput
    )
    # What chosen() cut from the range asked for, said to the operator.
    cut = ""

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            raise forms.ValidationError("The range starts after it ends.")
        return cleaned

    def chosen(self) -> tuple[date, date, Any]:
        """The days and user to show: the last week for everyone unless the form chose valid
        ones. Days asked for are cut to those runs were made on, from the first run's to today:
        the edges of the calendar (0001-01-01, 9999-12-31) cannot be turned into times, and no
        run lies beyond those days anyway."""
        today = timezone.localdate()
        since, until = today - timedelta(days=USAGE_DEFAULT_DAYS - 1), today
        if not self.is_valid():
            return since, until, None
        user = self.cleaned_data["user"]
        if not (self.cleaned_data["since"] or self.cleaned_data["until"]):
            return since, until, user
        asked = (self.cleaned_data["since"] or since, self.cleaned_data["until"] or until)
        first = AgentRun.objects.order_by("pk").values_list("created_at", flat=True).first()
        earliest = timezone.localdate(first) if first else today
        since, until = max(asked[0], earliest), min(asked[1], today)
        made = f"Runs were made from {earliest:%Y-%m-%d} to today"
        if since > until:
            self.cut = f"{made}: none in the range asked for."
        elif (since, until) != asked:
            self.cut = f"{made}, so the range shown is {since:%Y-%m-%d} to {until:%Y-%m-%d}."
        return since, until, user


class RunEventAdmin(AuditAdmin):
    list_display = ("id", "run_page", "seq", "kind", "step", "gist", "created_at")
    # No filter on kind: without an index on it, finding a rare kind among millions of events
    # is a scan of them all. The list is for one run's events (`?run__id__exact=`, linked from
    # its page); trips and tool calls have lists of their own.
    ordering = ("-id",)
    fields = ("run_page", "seq", "kind", "step", "created_at", "data_json")
    readonly_fields = ("run_page", "data_json")

    @admin.display(description="run", ordering="run_id")
    def run_page(self, event: RunEvent) -> SafeString:
        return run_link(event.run_id)

    @admin.display(description="what happened")
    def gist(self, event: RunEvent) -> str:
        return selectors.gist(event.event)

    @admin.display(description="data")
    def data_json(self, event: RunEvent) -> SafeString:
        return pretty_json(event.data)


class BreakerTripAdmin(StepLinks, AuditAdmin):
    list_display = (
        "id",
        "run_page",
        "step_page",
        "tool",
        "reason_badge",
        "failure_count",
        "user_name",
        "created_at",
    )
    list_select_related = ("run__user",)
    list_filter = ("tool", "reason", RunUserFilter)
    date_hierarchy = "created_at"
    search_fields = ("tool",)
    ordering = ("-id",)
    change_list_template = "admin/agent/breakertrip/change_list.html"
    fields = ("run_page", "step_page", "tool", "reason_badge", "created_at", "failures_json")
    readonly_fields = ("run_page", "step_page", "reason_badge", "failures_json")

    @admin.display(description="reason", ordering="reason")
    def reason_badge(self, trip: BreakerTrip) -> SafeString:
        return halt_badge(trip.reason)

    @admin.display(description="failures")
    def failure_count(self, trip: BreakerTrip) -> int:
        return len(trip.failures)

    @admin.display(description="user")
    def user_name(self, trip: BreakerTrip) -> SafeString:
        return filter_link(self, trip.run.user)

    @admin.display(description="failures that led there")
    def failures_json(self, trip: BreakerTrip) -> SafeString:
        return pretty_json(trip.failures)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(
            request, (extra_context or {}) | {"trip_summary": selectors.trip_summary()}
        )
