"""MCP credentials at rest: encrypted under the configured keys, readable across a key rotation."""

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.core.exceptions import ImproperlyConfigured

from mcp_servers import secrets
from mcp_servers.secrets import CredentialUnreadable, decrypt, encrypt, generate_key, rotate

pytestmark = pytest.mark.fast

CLEAR = "Bearer sk-live-4f1c2a9e"


@pytest.fixture
def one_key(settings):
    settings.LOOP_CREDENTIAL_KEYS = [generate_key()]
    return settings


def test_a_credential_reads_back_as_it_was_written(one_key):
    assert decrypt(encrypt(CLEAR)) == CLEAR
    assert decrypt(encrypt("")) == ""
    assert decrypt(encrypt("clé ünïcødé ✓")) == "clé ünïcødé ✓"


def test_the_ciphertext_never_holds_the_clear_text(one_key):
    token = encrypt(CLEAR)

    assert CLEAR not in token
    assert "sk-live" not in token
    assert encrypt(CLEAR) != token, "each encryption is fresh, so equal secrets do not show"


def test_a_rotation_keeps_old_credentials_readable_and_moves_them_to_the_new_key(settings):
    old, new = generate_key(), generate_key()
    settings.LOOP_CREDENTIAL_KEYS = [old]
    written_long_ago = encrypt(CLEAR)

    settings.LOOP_CREDENTIAL_KEYS = [new, old]
    assert decrypt(written_long_ago) == CLEAR
    rotated = rotate(written_long_ago)
    assert Fernet(new.encode()).decrypt(rotated.encode()).decode() == CLEAR
    with pytest.raises(InvalidToken):
        Fernet(old.encode()).decrypt(rotated.encode())

    settings.LOOP_CREDENTIAL_KEYS = [new]
    assert decrypt(rotated) == CLEAR
    with pytest.raises(CredentialUnreadable):
        decrypt(written_long_ago)


def test_new_credentials_are_written_under_the_first_key(settings):
    old, new = generate_key(), generate_key()
    settings.LOOP_CREDENTIAL_KEYS = [new, old]

    token = encrypt(CLEAR)

    assert Fernet(new.encode()).decrypt(token.encode()).decode() == CLEAR


def test_a_credential_under_a_retired_key_is_unreadable_with_a_clear_message(settings):
    settings.LOOP_CREDENTIAL_KEYS = [generate_key()]
    token = encrypt(CLEAR)
    settings.LOOP_CREDENTIAL_KEYS = [generate_key()]

    with pytest.raises(CredentialUnreadable, match="no longer in LOOP_CREDENTIAL_KEYS"):
        decrypt(token)
    with pytest.raises(CredentialUnreadable):
        rotate(token)
    with pytest.raises(CredentialUnreadable):
        decrypt("not a token at all")


def test_without_configured_keys_a_key_derived_from_the_secret_key_is_used(settings):
    settings.LOOP_CREDENTIAL_KEYS = []
    settings.SECRET_KEY = "one site's secret key"
    token = encrypt(CLEAR)

    assert decrypt(token) == CLEAR
    assert CLEAR not in token
    assert Fernet(secrets._derived_key("one site's secret key")).decrypt(token.encode())

    settings.SECRET_KEY = "another site's secret key"
    with pytest.raises(CredentialUnreadable, match="SECRET_KEY"):
        decrypt(token)


def test_a_malformed_key_setting_names_the_bad_entry(settings):
    settings.LOOP_CREDENTIAL_KEYS = [generate_key(), "not-a-fernet-key"]
    with pytest.raises(ImproperlyConfigured, match=r"LOOP_CREDENTIAL_KEYS\[1\]"):
        encrypt(CLEAR)

    settings.LOOP_CREDENTIAL_KEYS = generate_key()
    with pytest.raises(ImproperlyConfigured, match="list"):
        encrypt(CLEAR)
