"""The people in the operators' console: sign-ups waiting for approval, the accounts, the groups.

Approving a sign-up is a permission of its own (`accounts.approve_signup`) and grants nothing
else. Privileges (staff, superuser, groups, permissions) are a superuser's alone to give: anyone
else sees those fields read-only, and cannot change or delete an account that holds any, their
own included, since a password or an email changed there is a way into its privileges.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.widgets import AdminSplitDateTime
from django.contrib.auth import admin as auth_admin
from django.contrib.auth.models import Group, User
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString
from django.utils.text import capfirst

from accounts.forms import PersonChangeForm, PersonCreationForm
from accounts.group_rights import GroupRightsInline, person_rights, quotas_of
from accounts.models import PRIVILEGED, WAITING_FOR_APPROVAL, SignUp
from accounts.signups import tell_approved
from agent.models import AgentRun, ToolExecution
from console.widgets import MalformedFiltersSaid, link, list_url
from memory.models import Memory

PRIVILEGE_FIELDS = ("is_staff", "is_superuser", "groups", "user_permissions")
APPROVE_SIGNUP = "accounts.approve_signup"


def is_superuser(request: HttpRequest) -> bool:
    return request.user.is_active and request.user.is_superuser


def any_privileged(users: QuerySet[Any] | list[Model]) -> bool:
    pks = [user.pk for user in users]
    return User.objects.filter(PRIVILEGED, pk__in=pks).exists()


class Approves(admin.ModelAdmin[Any]):
    """The action that lets selected sign-ups in, for whoever may approve sign-ups."""

    def has_approve_signup_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(APPROVE_SIGNUP)

    @admin.action(description="Approve selected sign-ups", permissions=["approve_signup"])
    def approve(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        # Counted before the update: the sign-ups page's queryset holds only accounts waiting,
        # so counted after it, the approved ones were gone and "-1 selected were not waiting".
        selected = queryset.count()
        # As User rows, whichever page asked: each approval is then in the account's history.
        waiting = list(User.objects.filter(WAITING_FOR_APPROVAL, pk__in=queryset.values("pk")))
        # Filtered again as it is written: an account given privileges meanwhile stays out.
        User.objects.filter(WAITING_FOR_APPROVAL, pk__in=[user.pk for user in waiting]).update(
            is_active=True
        )
        for user in waiting:
            self.log_change(request, user, "Approved the sign-up.")
        unmailed = tell_approved(waiting, request.build_absolute_uri(reverse("login")))
        skipped = selected - len(waiting)
        message = f"Approved {len(waiting)} sign-up{'s' if len(waiting) != 1 else ''}."
        if skipped:
            message += f" {skipped} selected were not waiting for approval and stay as they were."
        if unmailed:
            message += f" {unmailed} could not be told by mail (the log says why)."
        self.message_user(request, message)


@admin.register(SignUp)
class SignUpAdmin(Approves, MalformedFiltersSaid):
    """Only the accounts waiting, read-only: what an operator who approves sign-ups needs."""

    list_display = ("username", "email", "date_joined")
    search_fields = ("username", "email")
    ordering = ("-date_joined",)
    actions = ("approve",)
    fields = ("username", "email", "date_joined")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[SignUp]:
        return super().get_queryset(request).filter(WAITING_FOR_APPROVAL)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return request.user.has_perm(APPROVE_SIGNUP)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class ApprovalFilter(admin.SimpleListFilter):
    title = "approval"
    parameter_name = "approval"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("waiting", "Waiting for approval")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "waiting":
            return queryset.filter(WAITING_FOR_APPROVAL)
        return queryset


admin.site.unregister(User)


@admin.register(User)
class PeopleAdmin(Approves, MalformedFiltersSaid, auth_admin.UserAdmin[User]):
    form = PersonChangeForm
    add_form = PersonCreationForm
    list_display = ("username", "email", "is_active", "is_staff", "date_joined", "last_login")
    list_filter = (ApprovalFilter, *auth_admin.UserAdmin.list_filter)
    actions = ("approve",)
    fieldsets = (
        *(auth_admin.UserAdmin.fieldsets or ()),
        ("Activity", {"fields": ("activity",)}),
        ("What they may use", {"fields": ("rights",)}),
    )
    readonly_fields = ("activity", "rights")

    class Media:
        js = ("accounts/admin_labels.js",)

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """A date and time field is two inputs under one label, which names neither: each says
        which it is ("Last login: date"), for a screen reader and axe alike."""
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if field is not None and isinstance(field.widget, AdminSplitDateTime):
            for part, widget in zip(("date", "time"), field.widget.widgets, strict=True):
                widget.attrs["aria-label"] = f"{capfirst(db_field.verbose_name)}: {part}"
        return field

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        fields = super().get_readonly_fields(request, obj)
        # Read-only fields are left out of the form, so whatever is posted for them is ignored.
        return fields if is_superuser(request) else (*fields, *PRIVILEGE_FIELDS)

    def may_manage(self, request: HttpRequest, obj: Model | None) -> bool:
        return obj is None or is_superuser(request) or not any_privileged([obj])

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # Also guards the password form (UserAdmin asks this with the account whose it is).
        return super().has_change_permission(request, obj) and self.may_manage(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return super().has_delete_permission(request, obj) and self.may_manage(request, obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, ...]:
        # The bulk delete action asks no per-account question; this is where it can be refused.
        deleted, counts, needed, protected = super().get_deleted_objects(objs, request)
        if not is_superuser(request) and any_privileged(objs):
            needed = {*needed, "accounts that hold privileges (only a superuser deletes those)"}
        return deleted, counts, needed, protected

    @admin.display(description="activity")
    def activity(self, user: User) -> SafeString:
        if user.pk is None:
            return "—"
        links = (
            link(list_url(AgentRun, user=user.pk), "runs"),
            link(list_url(ToolExecution, user=user.pk), "tool executions"),
            link(list_url(Memory, user=user.pk), "memories"),
            link(reverse("admin:agent_agentrun_usage") + f"?user={user.pk}", "usage"),
        )
        return format_html_join(" · ", "{}", ((item,) for item in links))

    @admin.display(description="rights")
    def rights(self, user: User) -> SafeString:
        """Their rights as their groups give them (read-only: a group's page changes them)."""
        return person_rights(user)


admin.site.unregister(Group)


@admin.register(Group)
class GroupAdmin(MalformedFiltersSaid, auth_admin.GroupAdmin):
    """A group's permissions are its members' privileges: only a superuser makes or edits one.
    Its page also says what its people may use (rights.models.GroupRights) and its quotas."""

    inlines = (GroupRightsInline,)
    fieldsets = ((None, {"fields": ("name", "permissions")}), ("Quotas", {"fields": ("quotas",)}))
    readonly_fields = ("quotas",)

    class Media:
        js = ("accounts/admin_labels.js",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return is_superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return is_superuser(request)

    @admin.display(description="quotas")
    def quotas(self, group: Group) -> SafeString:
        return quotas_of(group)
