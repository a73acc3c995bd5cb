"""Bad input to the chat's and the logins' forms is a 400 that says what was wrong, never a 500:
a NUL in a conversation's new title, a form body in a charset other than UTF-8 (which Django's
error page read a second time), a broken multipart body."""

import pytest
from django.test import Client

from agent.models import AgentRun
from agent.runs import new_conversation

pytestmark = pytest.mark.django_db

UTF16_FORM = "application/x-www-form-urlencoded; charset=utf-16"
NOT_UTF8 = b"The form could not be read: HTTP requests with the 'application/x-www-form-urlencoded'"


def csrf_client() -> tuple[Client, str]:
    """A client that passes the CSRF check by its cookie and header, as a browser script would:
    the check then reads the form body too."""
    client = Client(enforce_csrf_checks=True, raise_request_exception=False)
    client.get("/accounts/login/")
    return client, client.cookies["csrftoken"].value


def test_a_nul_in_a_renamed_title_is_refused_with_a_message(client, alice):
    conversation = new_conversation(alice, "Sums")
    client.force_login(alice)
    response = client.post(f"/c/{conversation.pk}/rename/", {"title": "a\x00b"})
    assert response.status_code == 400
    assert "The title was not changed: Null characters are not allowed." in response.text
    conversation.refresh_from_db()
    assert conversation.title == "Sums"


@pytest.mark.parametrize("debug", [False, True])  # in DEBUG the error page shows the form
def test_a_utf16_form_to_the_login_page_is_a_400_without_a_login(settings, debug):
    settings.DEBUG = debug
    client, token = csrf_client()
    response = client.post(
        "/accounts/login/",
        b"username=alice&password=guess",  # the test client sends it encoded as UTF-16
        content_type=UTF16_FORM,
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 400
    assert response.content.startswith(NOT_UTF8)


@pytest.mark.parametrize("debug", [False, True])
def test_a_utf16_form_to_a_logged_in_view_is_a_400_and_starts_nothing(settings, alice, debug):
    settings.DEBUG = debug
    client, token = csrf_client()
    client.force_login(alice)
    response = client.post(
        "/send/", b"task=What is 1 + 1?", content_type=UTF16_FORM, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 400
    assert response.content.startswith(NOT_UTF8)
    assert not AgentRun.objects.exists()


def test_a_multipart_body_without_a_boundary_is_a_400(alice):
    client, token = csrf_client()
    client.force_login(alice)
    response = client.post(
        "/send/",
        b"--x\r\n",
        content_type="multipart/form-data; boundary=",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 400
    assert b"The form could not be read: Invalid boundary in multipart" in response.content
