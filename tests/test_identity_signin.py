"""What a verified sign-in does here (identity.signin.admit), claim by claim: groups only from
the allow-list and an operator's kept, staff only through LOOP_OIDC_STAFF_GROUP and taken back
only when it made it, LOOP_SIGNUP=off refusing newcomers, a linked account found by its subject
whatever its name, and a new name another account holds not taken."""

import pytest
from django.contrib.auth.models import Group, User

from identity.models import ProviderIdentity
from identity.signin import SignInRefused, admit

pytestmark = pytest.mark.django_db

ISSUER = "https://sso.example.org/realms/staff"


@pytest.fixture(autouse=True)
def provider_settings(settings):
    settings.LOOP_OIDC_ISSUER = ISSUER
    settings.LOOP_OIDC_GROUPS = ["analysts", "writers"]
    settings.LOOP_SIGNUP = "open"


def claims(**changes):
    return {"sub": "alice-0001", "preferred_username": "alice", "groups": []} | changes


def group_names(user: User) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def test_groups_follow_the_claim_within_the_allow_list_and_an_operators_stay():
    alice = admit(claims(groups=["analysts", "writers", "admins"]), "")
    assert group_names(alice) == {"analysts", "writers"}
    alice.groups.add(Group.objects.create(name="beta-testers"))  # an operator's
    alice = admit(claims(groups=["writers"]), "")
    assert group_names(alice) == {"writers", "beta-testers"}


def test_staff_only_through_the_staff_group_and_taken_back_only_when_it_made_it(settings):
    assert not admit(claims(groups=["loop-operators"]), "").is_staff
    settings.LOOP_OIDC_STAFF_GROUP = "loop-operators"
    alice = admit(claims(groups=["loop-operators"]), "")
    assert alice.is_staff
    assert not alice.is_superuser
    assert not admit(claims(groups=[]), "").is_staff
    User.objects.filter(pk=alice.pk).update(is_staff=True)  # an operator makes her staff
    assert admit(claims(groups=[]), "").is_staff


def test_signup_off_refuses_a_newcomer_and_admits_a_linked_account(settings):
    settings.LOOP_SIGNUP = "off"
    with pytest.raises(SignInRefused, match="ask an operator to add you"):
        admit(claims(), "")
    local = User.objects.create_user("a.smith")
    ProviderIdentity.objects.create(user=local, issuer=ISSUER, subject="alice-0001")
    assert admit(claims(), "refresh").pk == local.pk  # linked by subject; renamed from claims
    assert User.objects.get(pk=local.pk).username == "alice"


def test_a_new_name_another_account_holds_is_not_taken():
    alice = admit(claims(), "")
    User.objects.create_user("alicia")
    assert admit(claims(preferred_username="alicia"), "").username == "alice"
    assert alice.pk == User.objects.get(username="alice").pk


def test_another_subject_with_a_taken_name_is_refused():
    admit(claims(), "")
    with pytest.raises(SignInRefused, match="never takes over"):
        admit(claims(sub="someone-else"), "")
    assert ProviderIdentity.objects.count() == 1
