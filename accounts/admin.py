"""Staff approve accounts that sign-up left waiting (LOOP_SIGNUP=approve) from the user list."""

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest

admin.site.unregister(User)


@admin.register(User)
class LoopUserAdmin(UserAdmin):
    actions = ("approve",)

    @admin.action(description="Approve the selected accounts (they can log in)")
    def approve(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        approved = queryset.filter(is_active=False).update(is_active=True)
        self.message_user(request, f"Approved {approved} account(s).", messages.SUCCESS)
