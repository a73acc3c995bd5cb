"""A webhook's signature is the Standard Webhooks one: the convention's own example (the secret,
id, timestamp and body of its README and reference libraries' tests) signs to its value."""

import pytest

from notifications.models import SECRET_PREFIX, new_secret
from notifications.webhooks import signature, signed_headers

pytestmark = pytest.mark.fast

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
WEBHOOK_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = '{"test": 2432232314}'


def test_the_convention_s_example_signs_to_its_value():
    assert signature(SECRET, WEBHOOK_ID, TIMESTAMP, BODY) == (
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


def test_the_headers_carry_the_id_the_timestamp_and_the_signature():
    headers = signed_headers(SECRET, WEBHOOK_ID, TIMESTAMP, BODY)
    assert headers["webhook-id"] == WEBHOOK_ID
    assert headers["webhook-timestamp"] == str(TIMESTAMP)
    assert headers["webhook-signature"] == signature(SECRET, WEBHOOK_ID, TIMESTAMP, BODY)


def test_a_changed_body_or_time_signs_differently():
    signed = signature(SECRET, WEBHOOK_ID, TIMESTAMP, BODY)
    assert signature(SECRET, WEBHOOK_ID, TIMESTAMP + 1, BODY) != signed
    assert signature(SECRET, WEBHOOK_ID, TIMESTAMP, BODY + " ") != signed


def test_a_new_secret_is_32_random_bytes_in_the_convention_s_form():
    secret = new_secret()
    assert secret.startswith(SECRET_PREFIX)
    assert len(secret) == len(SECRET_PREFIX) + 44  # base64 of 32 bytes
    assert new_secret() != secret
