"""`manage.py apikey` (api/management/commands/apikey.py): `create` prints the new key alone on
its last line, and it works through the API; `list` shows prefixes and never a secret;
`revoke PREFIX` stops the key at its next request. An unknown person, scope or prefix is a
clear error."""

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from api.keys import create_key
from api.models import ApiKey


def works(secret: str) -> bool:
    response = Client().get("/api/v1/runs", headers={"Authorization": f"Bearer {secret}"})
    return response.status_code == 200


def test_create_prints_a_working_key_last_and_list_and_revoke_act_on_it(
    manage, child_database_url, alice
):
    env = {"DATABASE_URL": child_database_url}
    made = manage(
        *("apikey", "create", "alice", "--name", "ci job", "--scope", "read"),
        *("--scope", "run", "--expires-days", "30"),
        env=env,
    )
    assert made.returncode == 0, made.stderr
    *said, secret = made.stdout.strip().splitlines()
    assert "shown this once" in said[-1]
    assert secret.startswith("loop_")
    assert " " not in secret
    assert made.stdout.count(secret) == 1
    assert secret not in made.stderr
    key = ApiKey.objects.get(owner=alice)
    assert (key.name, key.scopes) == ("ci job", ["read", "run"])
    assert key.expires_at is not None
    assert works(secret)

    listed = manage("apikey", "list", "alice", env=env)
    assert listed.returncode == 0, listed.stderr
    assert f"{key.prefix}  alice  'ci job'  read,run" in listed.stdout
    assert secret not in listed.stdout
    assert key.digest not in listed.stdout

    revoked = manage("apikey", "revoke", key.prefix, env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert f"Revoked {key.prefix}" in revoked.stdout
    assert not works(secret)
    assert "revoked" in manage("apikey", "list", env=env).stdout


@pytest.mark.django_db
def test_an_unknown_person_scope_or_prefix_is_a_clear_error(alice):
    with pytest.raises(CommandError, match="No person is called 'nobody'"):
        call_command("apikey", "create", "nobody")
    with pytest.raises(CommandError, match="Unknown scope 'admin'"):
        call_command("apikey", "create", "alice", "--scope", "admin")
    with pytest.raises(CommandError, match="No key has the prefix 'loop_nothing00'"):
        call_command("apikey", "revoke", "loop_nothing00")
    with pytest.raises(CommandError, match="No person is called 'nobody'"):
        call_command("apikey", "list", "nobody")
    with pytest.raises(CommandError, match="1 or more"):
        call_command("apikey", "create", "alice", "--expires-days", "0")
    assert not ApiKey.objects.exists()
    create_key(alice, "kept")
    with pytest.raises(CommandError, match="Name the key"):
        call_command("apikey", "create", "alice", "--name", " ")
    assert ApiKey.objects.count() == 1
