"""Who a request to the API is: the person whose key it shows as `Authorization: Bearer`, and
only that. A session cookie authenticates nothing here (so no request forged by a browser can
act), and a key nothing but here (pages and the chat socket take the session alone)."""

import threading
import time
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.throttling import BaseThrottle

from api.errors import ApiError
from api.keys import key_for, note_use
from api.models import ApiKey, Scope


class KeyAuth(HttpBearer):
    """A working key with `scope`: anything less is 401 (no key, a wrong, revoked or expired
    one, a deactivated person's), a key without the scope 403. Each scope's class names the
    security scheme its operations list in the OpenAPI document, so the document says which
    scope each operation takes."""

    scope = Scope.READ

    def __init__(self) -> None:
        super().__init__()
        self.openapi_security_schema["description"] = (
            f"A personal API key with the {self.scope.value!r} scope ({self.scope.label})."
        )

    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        key = key_for(token)
        if key is None:
            return None
        if self.scope not in key.scopes:
            raise ApiError(
                403,
                "scope_missing",
                f"This key may not do this: it lacks the {self.scope.value!r} scope "
                f"({self.scope.label.lower()}). Make a key with it on Settings → API keys.",
            )
        note_use(key, request.META.get("REMOTE_ADDR"))
        return key


class ReadKey(KeyAuth):
    scope = Scope.READ


class RunKey(KeyAuth):
    scope = Scope.RUN


class DecideKey(KeyAuth):
    scope = Scope.DECIDE


class FilesKey(KeyAuth):
    scope = Scope.FILES


READ, RUN, DECIDE, FILES = ReadKey(), RunKey(), DecideKey(), FilesKey()


def key_of(request: HttpRequest) -> ApiKey:
    """The key the request was authenticated with (every operation has one)."""
    key: Any = getattr(request, "auth", None)
    if not isinstance(key, ApiKey):
        raise ApiError(401, "unauthorized", "Give a valid API key.")
    return key


def person_of(request: HttpRequest) -> User:
    """The person the request acts as: its key's owner, never the session's user."""
    return key_of(request).owner


class Window(BaseThrottle):
    """At most `limit()` requests a minute (a calendar minute) for one `ident`, counted in the
    cache, which is Redis shared by every web process when REDIS_URL is set; the refusal says
    when the minute ends (ninja sends it as Retry-After)."""

    kind = ""

    def limit(self) -> int:
        raise NotImplementedError

    def ident(self, request: HttpRequest) -> object:
        raise NotImplementedError

    def allow_request(self, request: HttpRequest) -> bool:
        now = time.time()
        counter = f"loop:api-{self.kind}:{self.ident(request)}:{int(now // 60)}"
        cache.add(counter, 0, timeout=120)
        _waits.seconds = 60 - now % 60
        return cache.incr(counter) <= self.limit()

    def wait(self) -> float | None:
        return getattr(_waits, "seconds", None)


_waits = threading.local()  # allow_request's wait, read by wait() right after, in one thread


class PerKey(Window):
    """LOOP_API_KEY_REQUESTS_PER_MINUTE requests a minute for one key."""

    kind = "key"

    def limit(self) -> int:
        return settings.LOOP_API_KEY_REQUESTS_PER_MINUTE

    def ident(self, request: HttpRequest) -> object:
        return key_of(request).prefix


class PerPerson(Window):
    """LOOP_API_PERSON_REQUESTS_PER_MINUTE requests a minute for all of one person's keys."""

    kind = "person"

    def limit(self) -> int:
        return settings.LOOP_API_PERSON_REQUESTS_PER_MINUTE

    def ident(self, request: HttpRequest) -> object:
        return key_of(request).owner_id
