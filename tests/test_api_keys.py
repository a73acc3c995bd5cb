"""A person's API keys page (api/pages.py) and the keys in the console (api/admin.py): a key is
made on the page and shown once, in the response that made it, stored only as its digest and
never logged; it works through the API at once and stops at the next request once revoked
(from the page or the console), expired, or its person deactivated or deleted; another
person's keys do not exist on the page; a key is never a login to a page. The console lists
and revokes keys for staff alone, and shows the key a run was started with and a decision made
through."""

import logging
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from api.keys import create_key, key_for
from api.models import ALL_SCOPES, ApiKey
from approvals.models import ApprovalRequest, Via
from tests.test_approval_console import waiting_run

pytestmark = pytest.mark.django_db

PAGE = "/settings/keys/"
REVOKE = "/settings/keys/revoke/"
RUNS = "/api/v1/runs"
KEYS = reverse("admin:api_apikey_changelist")
NEW_KEY = {"name": "my script", "scopes": ["read", "run"], "expiry": "never"}


@pytest.fixture
def every_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every logger at DEBUG (django.request, django.server, the database's own), captured."""
    caplog.set_level(logging.DEBUG)
    for name in [*logging.root.manager.loggerDict, "django.request", "django.db.backends"]:
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


@pytest.fixture(autouse=True)
def room_for_runs(settings):
    settings.LOOP_USER_ACTIVE_RUNS = 50


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def api_status(secret: str) -> int:
    """What GET /api/v1/runs answers that key, from a client with no session."""
    return Client().get(RUNS, headers=bearer(secret)).status_code


def made_secret(page: str) -> str:
    """The secret the creation response shows in its readonly field."""
    start = page.index('id="new-key-secret"')
    value = page.index('value="', start) + len('value="')
    return page[value : page.index('"', value)]


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Everything the captured records say: their messages, arguments and formatted text."""
    return "\n".join(
        f"{record.getMessage()} {record.args!r} {record.__dict__!r}" for record in caplog.records
    )


def test_the_page_shows_a_new_key_once_and_keeps_only_its_digest(as_alice, alice, every_log):
    with CaptureQueriesContext(connection) as queries:
        made = as_alice.post(PAGE, NEW_KEY)
    assert made.status_code == 200
    page = made.content.decode()
    secret = made_secret(page)
    assert secret.startswith("loop_")
    assert "shown this once" in page
    assert "no-store" in made["Cache-Control"]  # no cache keeps the page that shows it
    key = ApiKey.objects.get(owner=alice)
    assert (key.name, key.scopes, key.expires_at) == ("my script", ["read", "run"], None)
    assert secret.startswith(key.prefix + "_")

    # The database holds the digest alone: the secret is in no column of the key's row, and
    # no statement sent it anywhere (a session, a message).
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM api_apikey WHERE id = %s", [key.pk])
        row = cursor.fetchone()
    assert not any(secret in str(column) for column in row)
    assert key.digest in [str(column) for column in row]
    assert not any(secret in f"{query['sql']}" for query in queries.captured_queries)

    # Used, right and wrong, and still never logged.
    assert api_status(secret) == 200
    assert api_status(secret[:-3] + "abc") == 401
    assert every_log.records  # the capture works: the 401 was logged as django.request's
    assert "Unauthorized" in logged(every_log)
    assert secret not in logged(every_log)
    assert secret[len(key.prefix) + 1 :] not in logged(every_log)

    # Shown never again: a reload shows its prefix, its last use, and not the secret.
    again = as_alice.get(PAGE).content.decode()
    assert secret not in again
    assert 'id="new-key-secret"' not in again
    assert f"{key.prefix}…" in again
    assert "from 127.0.0.1" in again


def test_the_page_lists_scopes_expiry_and_state(as_alice, alice):
    page = as_alice.get(PAGE).content.decode()
    assert "You have no API keys." in page
    for scope in ALL_SCOPES:  # each scope a checkbox, with what it allows
        assert f'value="{scope}"' in page
    assert "Approve or deny calls that wait for a decision" in page
    for choice in ("Never", "In 30 days", "In 90 days", "In 365 days", "On a date"):
        assert choice in page

    as_alice.post(PAGE, {**NEW_KEY, "name": "month", "expiry": "30"})
    month = ApiKey.objects.get(name="month")
    assert month.expires_at is not None
    assert timedelta(days=29) < month.expires_at - timezone.now() <= timedelta(days=30)
    day = timezone.localdate() + timedelta(days=400)
    on_date = {**NEW_KEY, "name": "dated", "expiry": "date", "expires_on": day.isoformat()}
    as_alice.post(PAGE, on_date)
    assert timezone.localdate(ApiKey.objects.get(name="dated").expires_at) == day

    # A past day, no scope, no name: refused, saying why, and nothing made.
    past = {**on_date, "name": "past", "expires_on": "2001-01-01"}
    assert "Pick a day after today." in as_alice.post(PAGE, past).content.decode()
    no_scope = as_alice.post(PAGE, {**NEW_KEY, "scopes": []})
    assert no_scope.status_code == 400
    assert "Give the key at least one scope." in no_scope.content.decode()
    assert as_alice.post(PAGE, {**NEW_KEY, "scopes": ["root"]}).status_code == 400
    assert as_alice.post(PAGE, {**NEW_KEY, "name": "  "}).status_code == 400
    assert ApiKey.objects.count() == 2

    ApiKey.objects.filter(name="month").update(expires_at=timezone.now() - timedelta(days=1))
    as_alice.post(REVOKE, {"key": ApiKey.objects.get(name="dated").prefix})
    page = as_alice.get(PAGE).content.decode()
    assert "⧗</span> expired" in page
    assert "■</span> revoked" in page


def test_a_key_works_at_once_and_a_revoke_on_the_page_stops_it(as_alice, alice):
    secret = made_secret(as_alice.post(PAGE, NEW_KEY).content.decode())
    assert api_status(secret) == 200
    started = Client().post(
        RUNS, {"task": "Say hi"}, content_type="application/json", headers=bearer(secret)
    )
    assert started.status_code == 201

    key = ApiKey.objects.get(owner=alice)
    page = as_alice.get(PAGE).content.decode()
    assert f'name="key" value="{key.prefix}"' in page
    assert "Revoke my script" in page  # behind Revoke…, the confirmation
    revoked = as_alice.post(REVOKE, {"key": key.prefix})
    assert revoked.status_code == 302
    assert api_status(secret) == 401
    key.refresh_from_db()
    assert (key.state, key.revoked_by) == ("revoked", alice)
    assert "Revoked" in as_alice.get(PAGE).content.decode()


def test_a_revoke_takes_a_post_with_its_csrf_token(alice):
    key = create_key(alice, "guarded")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    assert browser.get(REVOKE).status_code == 405
    assert browser.post(REVOKE, {"key": key.key.prefix}).status_code == 403
    assert key_for(key.secret) is not None


def test_a_person_cannot_see_or_revoke_another_persons_keys(as_alice, alice, bob):
    bobs = create_key(bob, "bob's robot")
    page = as_alice.get(PAGE).content.decode()
    assert bobs.key.prefix not in page
    assert "bob's robot" not in page
    assert as_alice.post(REVOKE, {"key": bobs.key.prefix}).status_code == 404
    assert as_alice.post(REVOKE, {"key": "loop_nosuchkey0"}).status_code == 404
    assert as_alice.post(REVOKE, {"key": "x" * 500}).status_code == 404
    assert api_status(bobs.secret) == 200


def test_a_key_is_not_a_login_to_any_page(alice_key):
    for path in ("/", PAGE):
        response = Client().get(path, headers=bearer(alice_key))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    posted = Client().post(PAGE, NEW_KEY, headers=bearer(alice_key))
    assert posted.status_code == 302
    assert ApiKey.objects.count() == 1


def test_a_deactivated_or_deleted_persons_key_stops_at_once(alice, bob):
    alices, bobs = create_key(alice, "a").secret, create_key(bob, "b").secret
    assert api_status(alices) == api_status(bobs) == 200
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert api_status(alices) == 401
    bob.delete()
    assert api_status(bobs) == 401


def test_an_expired_key_fails(alice):
    made = create_key(alice, "short", expires_at=timezone.now() + timedelta(days=1))
    assert api_status(made.secret) == 200
    ApiKey.objects.filter(pk=made.key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_status(made.secret) == 401


# The console -------------------------------------------------------------------------------------


def test_the_console_lists_keys_and_never_their_digest(client, operator, alice, bob):
    alices = create_key(alice, "alice's laptop", ["read"])
    bobs = create_key(bob, "bob's ci", ["run", "files"])
    Client().get(RUNS, headers=bearer(alices.secret))  # a last use, from somewhere

    page = client.get(KEYS)
    assert page.status_code == 200
    text = page.content.decode()
    for made in (alices, bobs):
        assert f"{made.key.prefix}…" in text
        assert made.key.digest not in text
        assert made.secret not in text
    assert "alice&#x27;s laptop" in text
    assert "from 127.0.0.1" in text
    assert "<code>run</code>, <code>files</code>" in text
    assert "Revoke selected keys" in text

    found = client.get(KEYS, {"q": bobs.key.prefix})
    assert [key.pk for key in found.context["cl"].result_list] == [bobs.key.pk]
    by_owner = client.get(KEYS, {"q": "alice"})
    assert [key.pk for key in by_owner.context["cl"].result_list] == [alices.key.pk]

    change = client.get(reverse("admin:api_apikey_change", args=[alices.key.pk]))
    assert change.status_code == 200
    assert alices.key.digest not in change.content.decode()
    assert 'id="revoke-key"' in change.content.decode()
    # Nothing is added or changed here: keys are made by their person or the terminal.
    assert client.get(reverse("admin:api_apikey_add")).status_code == 403
    client.post(reverse("admin:api_apikey_change", args=[alices.key.pk]), {"name": "renamed"})
    assert ApiKey.objects.get(pk=alices.key.pk).name == "alice's laptop"


def test_the_console_revokes_keys_by_action_and_by_button(client, operator, alice, bob):
    first, second = create_key(alice, "one"), create_key(bob, "two")
    third = create_key(alice, "three")
    acted = client.post(
        KEYS,
        {"action": "revoke_keys", "_selected_action": [first.key.pk, second.key.pk]},
        follow=True,
    )
    assert "Revoked 2 keys." in acted.content.decode()
    assert api_status(first.secret) == api_status(second.secret) == 401
    assert api_status(third.secret) == 200
    assert ApiKey.objects.get(pk=first.key.pk).revoked_by == operator

    client.post(reverse("admin:api_apikey_revoke", args=[third.key.pk]))
    assert api_status(third.secret) == 401

    states = client.get(KEYS, {"state": "revoked"}).context["cl"].result_list
    assert len(states) == 3
    assert not client.get(KEYS, {"state": "active"}).context["cl"].result_list


def test_only_staff_with_the_permission_reach_keys_in_the_console(alice, bob):
    made = create_key(bob, "bob's")
    person = Client()
    person.force_login(alice)
    assert person.get(KEYS).status_code == 302  # to the console's login
    assert person.post(reverse("admin:api_apikey_revoke", args=[made.key.pk])).status_code == 302

    staff = User.objects.create_user("staff", is_staff=True)
    desk = Client()
    desk.force_login(staff)
    assert desk.get(KEYS).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_apikey"))
    assert desk.get(KEYS).status_code == 200
    assert desk.post(reverse("admin:api_apikey_revoke", args=[made.key.pk])).status_code == 403
    desk.post(KEYS, {"action": "revoke_keys", "_selected_action": [made.key.pk]})
    assert api_status(made.secret) == 200


def test_a_run_started_with_a_key_shows_the_key_on_its_console_page(client, operator, alice):
    made = create_key(alice, "nightly job", ["read", "run"])
    started = Client().post(
        RUNS, {"task": "Sum 1..10"}, content_type="application/json", headers=bearer(made.secret)
    )
    assert started.status_code == 201
    page = client.get(reverse("admin:agent_agentrun_change", args=[started.json()["id"]]))
    text = page.content.decode()
    assert "Started with API key" in text
    assert f"<code>{made.key.prefix}…</code> nightly job (read, run)" in text
    assert made.secret not in text

    chat_run = waiting_run(alice)  # one the chat started says nothing of keys
    text = client.get(reverse("admin:agent_agentrun_change", args=[chat_run.pk])).content.decode()
    assert "Started with API key" not in text


def test_a_decision_through_the_api_shows_the_api_and_the_key_in_the_audit(client, operator, alice):
    made = create_key(alice, "approver", ["read", "decide"])
    run = waiting_run(alice)
    call = ApprovalRequest.objects.get(run=run)
    decided = Client().post(
        f"{RUNS}/{run.pk}/approvals/{call.call_id}",
        {"decision": "approve"},
        content_type="application/json",
        headers=bearer(made.secret),
    )
    assert decided.status_code == 200, decided.content
    call.refresh_from_db()
    assert (call.decided_via, call.decided_key) == (Via.API, made.key.label)

    page = client.get(reverse("admin:approvals_approvalrequest_change", args=[call.pk]))
    text = page.content.decode()
    assert "The API" in text
    assert f"<code>{made.key.prefix}… approver</code>" in text
    listed = client.get(reverse("admin:approvals_approvalrequest_changelist")).content.decode()
    assert "through The API" in listed
