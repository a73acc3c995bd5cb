"""The forgetting record keeps the fact (which memory, whose, from which run, who forgot it and
when) and the forgotten text only for LOOP_FORGOTTEN_TEXT_DAYS, purged after it."""

from datetime import timedelta

import pytest

from agent.forgotten import take_back
from memory import personal
from memory.forgetting import forget, purge_forgotten_texts
from memory.models import ForgottenMemory, Memory, Origin
from memory.store import remember

pytestmark = pytest.mark.django_db

SECRET = "My passport number is X1234567."


def test_by_default_the_text_is_not_kept_only_the_fact(alice, settings):
    assert settings.LOOP_FORGOTTEN_TEXT_DAYS == 0
    memory = remember(alice, SECRET, source_run_id=21).memory
    [record] = take_back(alice, personal.these(alice, [memory.pk]))
    record.refresh_from_db()
    assert record.text == ""
    assert (record.memory_id, record.owner, record.owner_name) == (memory.pk, alice, "alice")
    assert (record.origin, record.source_run_id) == (Origin.RUN, 21)
    assert (record.forgotten_by, record.forgotten_by_name) == (alice, "alice")
    assert record.forgotten_at is not None
    assert not ForgottenMemory.objects.filter(text__contains="X1234567").exists()
    assert not Memory.objects.filter(text__contains="X1234567").exists()


def test_with_a_retention_the_text_is_kept_then_purged_once_older(alice, settings):
    settings.LOOP_FORGOTTEN_TEXT_DAYS = 30
    [record] = forget(Memory.objects.filter(pk=remember(alice, SECRET).memory.pk), alice)
    record.refresh_from_db()
    assert record.text == SECRET
    assert purge_forgotten_texts(now=record.forgotten_at + timedelta(days=29)) == 0
    record.refresh_from_db()
    assert record.text == SECRET
    assert purge_forgotten_texts(now=record.forgotten_at + timedelta(days=30, seconds=1)) == 1
    record.refresh_from_db()
    assert (record.text, record.memory_id, record.forgotten_by) == ("", record.memory_id, alice)
    assert purge_forgotten_texts(now=record.forgotten_at + timedelta(days=31)) == 0  # done once


def test_a_shorter_retention_purges_the_texts_kept_under_a_longer_one(alice, bob, settings):
    settings.LOOP_FORGOTTEN_TEXT_DAYS = 30
    remember(alice, SECRET)
    remember(bob, "Bob's locker code is 4321.")
    kept = take_back(alice, personal.mine(alice)) + take_back(bob, personal.mine(bob))
    settings.LOOP_FORGOTTEN_TEXT_DAYS = 0
    assert purge_forgotten_texts() == len(kept) == 2
    assert set(ForgottenMemory.objects.values_list("text", flat=True)) == {""}
    assert ForgottenMemory.objects.count() == 2  # the facts stay


def test_the_workers_hourly_job_purges_texts_past_their_retention(alice, settings):
    from asgiref.sync import async_to_sync
    from django.utils import timezone
    from procrastinate.contrib.django import app

    from engine.tasks import purge_forgotten_texts_job

    settings.LOOP_FORGOTTEN_TEXT_DAYS = 1
    [record] = forget(Memory.objects.filter(pk=remember(alice, SECRET).memory.pk), alice)
    ForgottenMemory.objects.filter(pk=record.pk).update(
        forgotten_at=timezone.now() - timedelta(days=2)
    )
    assert async_to_sync(purge_forgotten_texts_job.func)(timestamp=0) == 1
    record.refresh_from_db()
    assert record.text == ""
    periodic = {task.periodic_id for task in app.periodic_registry.periodic_tasks.values()}
    assert "purge_forgotten_texts" in periodic
