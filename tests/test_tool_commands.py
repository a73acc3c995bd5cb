"""Operators' entry points: calltool, sandboxcheck and the start-up check."""

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tools.checks import check_sandbox


@pytest.fixture
def alice(db) -> User:
    return User.objects.create_user("alice", password="not-used-here")


def calltool(capsys, *args: str) -> tuple[int, dict]:
    try:
        call_command("calltool", *args)
        code = 0
    except SystemExit as exit:
        code = exit.code
    return code, json.loads(capsys.readouterr().out)


def test_calltool_runs_code_in_the_users_workspace(alice, workspaces, capsys):
    code, result = calltool(
        capsys, "write_file", '{"path": "n.txt", "content": "41"}', "--user=alice"
    )
    assert code == 0
    code, result = calltool(
        capsys, "run_code", '{"code": "print(int(open(\'n.txt\').read()) + 1)"}', "--user=alice"
    )
    assert code == 0
    assert result["status"] == "ok"
    assert "42" in result["text"]
    assert result["policy"] == "bubblewrap"
    assert (workspaces / str(alice.pk) / "n.txt").read_text() == "41"


def test_calltool_exits_1_on_an_error_result(alice, workspaces, capsys):
    code, result = calltool(capsys, "read_file", '{"path": "../../etc/passwd"}', "--user=alice")
    assert code == 1
    assert result["status"] == "denied"


def test_calltool_refuses_an_unknown_user(db, workspaces):
    with pytest.raises(CommandError, match="No user named 'mallory'"):
        call_command("calltool", "list_files", "{}", "--user=mallory")


def test_sandboxcheck_reports_a_working_sandbox(capsys):
    call_command("sandboxcheck")
    assert "Sandbox works: bubblewrap" in capsys.readouterr().out


def test_sandboxcheck_fails_when_the_sandbox_cannot_run(monkeypatch):
    monkeypatch.setattr("sandbox.programs.shutil.which", lambda name, path=None: None)
    with pytest.raises(CommandError, match="does not work"):
        call_command("sandboxcheck")


def test_start_up_check_is_silent_when_the_sandbox_works():
    assert check_sandbox() == []


def test_start_up_check_warns_when_the_sandbox_cannot_run(monkeypatch):
    monkeypatch.setattr("sandbox.programs.shutil.which", lambda name, path=None: None)
    [warning] = check_sandbox()
    assert warning.id == "tools.W001"
    assert "bubblewrap" in warning.msg


def test_subprocess_mode_warns_at_start_and_in_checks(caplog):
    from django.apps import apps

    with override_settings(LOOP_SANDBOX="subprocess"):
        apps.get_app_config("tools").ready()
        [warning] = check_sandbox()
    assert warning.id == "tools.W002"
    assert "WITHOUT isolation" in caplog.text


def test_an_unknown_sandbox_setting_is_a_configuration_error():
    from django.core.exceptions import ImproperlyConfigured

    from sandbox.host import SandboxHost

    with (
        override_settings(LOOP_SANDBOX="docker"),
        pytest.raises(ImproperlyConfigured, match="LOOP_SANDBOX"),
    ):
        SandboxHost().sandbox()


def test_the_start_up_probe_leaves_no_sandbox_idling():
    from tools.checks import probe

    from .sandboxes import SANDBOX

    WARM = SANDBOX.pool
    WARM.drain()
    assert check_sandbox() == []
    assert probe(SANDBOX).works  # the probe, in a host that stays open to be looked at
    # Nothing to wait for: a sandbox started ahead is in the pool before run() returns (its
    # process may still be starting), so one the probe asked for would be here now.
    assert WARM.idle == {}
