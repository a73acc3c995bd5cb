"""Approving sign-ups grants nothing else: only a superuser changes who is staff, superuser, in
which group or with which permission, and nobody raises their own privileges by any admin URL."""

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from accounts.models import SignUp

pytestmark = pytest.mark.django_db

PASSWORD = "a long enough passphrase 42"
SIGNUPS = reverse("admin:accounts_signup_changelist")
PEOPLE = reverse("admin:auth_user_changelist")


def staff(username: str, *permissions: str) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    for name in permissions:
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return user


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def newcomer() -> User:
    return User.objects.create_user("newcomer", password=PASSWORD, is_active=False)


@pytest.fixture
def approver() -> User:
    return staff("approver", "accounts.approve_signup")


@pytest.fixture
def admins_group() -> Group:
    group = Group.objects.create(name="admins")
    group.permissions.set(Permission.objects.all())
    return group


def privileges(user: User) -> tuple:
    user.refresh_from_db()
    return (
        user.is_staff,
        user.is_superuser,
        set(user.groups.values_list("name", flat=True)),
        set(user.user_permissions.values_list("codename", flat=True)),
    )


def change_form(user: User, **changes: object) -> dict[str, object]:
    """The change form as the admin would post it for `user`, with `changes` made to it."""
    data: dict[str, object] = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "is_active": "on" if user.is_active else "",
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
    }
    data |= changes
    return {name: value for name, value in data.items() if value != ""}


def escalation(group: Group) -> dict[str, object]:
    return {
        "is_staff": "on",
        "is_superuser": "on",
        "groups": [group.pk],
        "user_permissions": list(Permission.objects.values_list("pk", flat=True)),
    }


def test_approving_a_sign_up_needs_only_its_own_permission(approver, newcomer):
    client = logged_in(approver)
    assert not approver.has_perm("auth.change_user")
    listed = client.get(SIGNUPS)
    assert listed.status_code == 200
    assert [user.pk for user in listed.context["cl"].result_list] == [newcomer.pk]
    response = client.post(
        SIGNUPS, {"action": "approve", "_selected_action": [newcomer.pk]}, follow=True
    )
    assert "Approved 1 sign-up." in response.content.decode()
    newcomer.refresh_from_db()
    assert newcomer.is_active
    history = reverse("admin:auth_user_history", args=[newcomer.pk])
    root = logged_in(User.objects.create_superuser("root", password=PASSWORD))
    assert "Approved the sign-up." in root.get(history).text
    assert LogEntry.objects.get(object_id=str(newcomer.pk)).user == approver


def test_the_sign_ups_page_shows_only_accounts_waiting_and_lets_nothing_be_edited(
    approver, newcomer
):
    User.objects.create_user("active")
    former = User.objects.create_user("former", is_active=False)
    User.objects.filter(pk=former.pk).update(last_login=former.date_joined)
    User.objects.create_user("dormant-staff", is_active=False, is_staff=True)
    client = logged_in(approver)
    listed = client.get(SIGNUPS).context["cl"].result_list
    assert [user.username for user in listed] == ["newcomer"]
    page = reverse("admin:accounts_signup_change", args=[newcomer.pk])
    assert client.get(page).status_code == 200  # read-only
    assert client.post(page, {"username": "renamed", "is_superuser": "on"}).status_code == 403
    assert privileges(newcomer) == (False, False, set(), set())


def test_approval_activates_no_account_that_holds_privileges(client):
    root = User.objects.create_superuser("root", password=PASSWORD)
    dormant = User.objects.create_user("dormant", is_active=False, is_staff=True)
    client.force_login(root)
    client.post(PEOPLE, {"action": "approve", "_selected_action": [dormant.pk]})
    dormant.refresh_from_db()
    assert not dormant.is_active


def test_an_approver_reaches_no_page_that_changes_privileges(approver, newcomer, admins_group):
    client = logged_in(approver)
    for target in (approver, newcomer):
        change = reverse("admin:auth_user_change", args=[target.pk])
        assert client.get(change).status_code == 403
        assert (
            client.post(change, change_form(target, **escalation(admins_group))).status_code == 403
        )
        password = reverse("admin:auth_user_password_change", args=[target.pk])
        assert client.post(password, {"password1": "x", "password2": "x"}).status_code == 403
    group = reverse("admin:auth_group_change", args=[admins_group.pk])
    assert client.post(group, {"name": "admins"}).status_code == 403
    assert client.post(reverse("admin:auth_group_add"), {"name": "mine"}).status_code == 403
    assert client.post(PEOPLE, {"action": "delete_selected"}).status_code == 403
    assert privileges(approver) == (True, False, set(), {"approve_signup"})
    assert privileges(newcomer) == (False, False, set(), set())
    assert not Group.objects.filter(name="mine").exists()


@pytest.fixture
def operator() -> User:
    """Staff who may change accounts, but are not superusers."""
    return staff("operator", "auth.view_user", "auth.change_user", "auth.delete_user")


def test_changing_accounts_does_not_carry_setting_privileges(operator, newcomer, admins_group):
    client = logged_in(operator)
    change = reverse("admin:auth_user_change", args=[newcomer.pk])
    page = client.get(change)
    assert set(page.context["adminform"].form.fields) >= {"username", "email", "is_active"}
    assert not set(page.context["adminform"].form.fields) & {
        "is_staff",
        "is_superuser",
        "groups",
        "user_permissions",
    }
    form = change_form(newcomer, email="new@example.com", **escalation(admins_group))
    assert client.post(change, form).status_code == 302
    newcomer.refresh_from_db()
    assert newcomer.email == "new@example.com"  # the rest of the form is saved...
    assert privileges(newcomer) == (False, False, set(), set())  # ...but no privilege


def test_nobody_but_a_superuser_changes_an_account_that_holds_privileges(
    operator, approver, admins_group
):
    client = logged_in(operator)
    root = User.objects.create_superuser("root", password=PASSWORD)
    before = {user.pk: privileges(user) for user in (operator, approver, root)}
    for target in (operator, approver, root):
        change = reverse("admin:auth_user_change", args=[target.pk])
        assert (
            client.post(change, change_form(target, **escalation(admins_group))).status_code == 403
        )
        password = reverse("admin:auth_user_password_change", args=[target.pk])
        new = {"password1": "taken over 12345", "password2": "taken over 12345"}
        assert client.post(password, new).status_code == 403
        delete = reverse("admin:auth_user_delete", args=[target.pk])
        assert client.post(delete, {"post": "yes"}).status_code == 403
    assert {user.pk: privileges(user) for user in (operator, approver, root)} == before
    root.refresh_from_db()
    assert root.check_password(PASSWORD)


def test_the_bulk_delete_action_spares_accounts_that_hold_privileges(operator):
    root = User.objects.create_superuser("root", password=PASSWORD)
    plain = User.objects.create_user("plain")
    client = logged_in(operator)
    selected = {"action": "delete_selected", "_selected_action": [root.pk, plain.pk]}
    asked = client.post(PEOPLE, selected)
    assert "only a superuser deletes those" in asked.content.decode()
    assert client.post(PEOPLE, selected | {"post": "yes"}).status_code == 403
    assert User.objects.filter(pk__in=[root.pk, plain.pk]).count() == 2


def test_a_superuser_sets_privileges(client, newcomer, admins_group):
    root = User.objects.create_superuser("root", password=PASSWORD)
    client.force_login(root)
    change = reverse("admin:auth_user_change", args=[newcomer.pk])
    form = change_form(newcomer, is_active="on", **escalation(admins_group))
    assert client.post(change, form).status_code == 302
    staff_flag, superuser_flag, groups, permissions = privileges(newcomer)
    assert (staff_flag, superuser_flag, groups) == (True, True, {"admins"})
    assert len(permissions) == Permission.objects.count()


def test_approving_is_its_own_permission_on_the_proxy_model():
    permission = Permission.objects.get(codename="approve_signup")
    assert permission.content_type.model_class() is SignUp
    assert not Permission.objects.filter(content_type=permission.content_type).exclude(
        pk=permission.pk
    )


def test_adding_an_account_sets_no_privilege(admins_group):
    adder = staff("adder", "auth.add_user", "auth.change_user", "auth.view_user")
    form = {
        "username": "made",
        "usable_password": "true",
        "password1": PASSWORD,
        "password2": PASSWORD,
        **escalation(admins_group),
    }
    assert logged_in(adder).post(reverse("admin:auth_user_add"), form).status_code == 302
    assert privileges(User.objects.get(username="made")) == (False, False, set(), set())


def test_no_operator_gives_an_account_a_deleted_accounts_placeholder_name(newcomer):
    adder = staff("adder", "auth.add_user", "auth.change_user", "auth.view_user")
    form = {
        "username": "deIeted-0a1b2c3d4e5f",  # a capital i for the l
        "usable_password": "true",
        "password1": PASSWORD,
        "password2": PASSWORD,
    }
    added = logged_in(adder).post(reverse("admin:auth_user_add"), form)
    assert added.status_code == 200
    assert "they stand for deleted accounts" in added.text
    assert not User.objects.filter(username=form["username"]).exists()

    url = reverse("admin:auth_user_change", args=[newcomer.pk])
    renamed = logged_in(adder).post(url, change_form(newcomer, username="d\u0435leted-0a1b"))
    assert renamed.status_code == 200
    assert "they stand for deleted accounts" in renamed.text
    newcomer.refresh_from_db()
    assert newcomer.username == "newcomer"


def test_a_placeholder_keeps_its_own_name_when_an_operator_edits_it():
    placeholder = User.objects.create_user("deleted-0a1b2c3d4e5f", is_active=False)
    superuser = User.objects.create_superuser("root", password=PASSWORD)
    url = reverse("admin:auth_user_change", args=[placeholder.pk])
    response = logged_in(superuser).post(url, change_form(placeholder, email="audit@example.com"))
    assert response.status_code == 302
    placeholder.refresh_from_db()
    assert placeholder.email == "audit@example.com"
