"""The API's errors: always JSON, `{"error": {"code": ..., "message": ...}}`, the code stable for
programs, the message for a person (the chat's own words where the chat refuses the same)."""

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError

from agent.connections import database_unreachable
from agent.runs import (
    AssistantUnavailable,
    InvalidTask,
    LogPruned,
    ModelNotOffered,
    OwnerGone,
    QuotaReached,
    SendingTooFast,
    TooManyActiveRuns,
)

logger = logging.getLogger(__name__)


class ErrorDetail(Schema):
    code: str
    message: str


class ErrorOut(Schema):
    """Every refusal's body."""

    error: ErrorDetail


def refusals(*statuses: int) -> dict[int, type[ErrorOut]]:
    """The error responses an operation documents: those of every operation (401 no working
    key, 403 a key without the scope, 422 input that is not what the schema says, 429 past a
    rate), and its own."""
    return {status: ErrorOut for status in sorted({401, 403, 422, 429, *statuses})}


class ApiError(Exception):
    """A refusal: its HTTP status, stable code, and a sentence saying what to do."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def not_found(what: str = "run") -> ApiError:
    """Another person's thing is as absent as one that never was."""
    return ApiError(404, "not_found", f"No such {what}.")


Shape = Callable[[ApiError], dict[str, Any]]


def loop_shape(error: ApiError) -> dict[str, Any]:
    return {"error": {"code": error.code, "message": error.message}}


SHAPES: dict[NinjaAPI, Shape] = {}  # an API's own error body (the OpenAI-compatible one's)


def answer(api: NinjaAPI, request: HttpRequest, error: ApiError) -> HttpResponse:
    body = SHAPES.get(api, loop_shape)(error)
    response = api.create_response(request, body, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


# Loop's refusals of a run's operations, as the API names them.
REFUSALS: list[tuple[type[Exception], int, str]] = [
    (TooManyActiveRuns, 429, "too_many_active_runs"),
    (ModelNotOffered, 400, "model_not_offered"),
    (LogPruned, 409, "log_pruned"),
    (OwnerGone, 409, "owner_gone"),
    (AssistantUnavailable, 409, "assistant_unavailable"),
    (InvalidTask, 400, "invalid_task"),
]


def refusal(error: Exception) -> ApiError:
    """The ApiError for one of Loop's own refusals (agent.runs.InvalidTask and its kinds); those
    that pass with time (a quota, the send rate) say when to try again (Retry-After)."""
    if isinstance(error, QuotaReached):
        wait = {"Retry-After": str(error.standing.retry_after())}
        return ApiError(429, "quota_reached", str(error), wait)
    if isinstance(error, SendingTooFast):
        wait = {"Retry-After": str(error.too_fast.retry_after())}
        return ApiError(429, "rate_limited", str(error), wait)
    for kind, status, code in REFUSALS:
        if isinstance(error, kind):
            return ApiError(status, code, str(error))
    return ApiError(400, "invalid_request", str(error))


def first_problem(errors: list[dict[str, Any]]) -> str:
    if not errors:
        return "The request is not valid."
    problem = errors[0]
    where = ".".join(str(part) for part in problem.get("loc", ()) if part not in ("body",))
    return f"{where or 'The request'}: {problem.get('msg', 'is not valid')}."


def install(api: NinjaAPI, shape: Shape = loop_shape) -> None:
    """Answer every error of `api` with the API's JSON shape (`shape` makes the body)."""
    SHAPES[api] = shape

    @api.exception_handler(ApiError)
    def api_error(request: HttpRequest, error: ApiError) -> HttpResponse:
        return answer(api, request, error)

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
        return answer(
            api,
            request,
            ApiError(
                401,
                "unauthorized",
                "Give a valid API key as `Authorization: Bearer loop_…`; make one on your "
                "Settings → API keys page. A revoked or expired key, or one of a deactivated "
                "account, no longer works.",
                {"WWW-Authenticate": 'Bearer realm="loop"'},
            ),
        )

    @api.exception_handler(ValidationError)
    def invalid(request: HttpRequest, error: ValidationError) -> HttpResponse:
        message = first_problem(list(error.errors))
        return answer(api, request, ApiError(422, "invalid_request", message))

    @api.exception_handler(Throttled)
    def throttled(request: HttpRequest, error: Throttled) -> HttpResponse:
        message = "Too many requests for this key or person; wait and try again."
        return answer(api, request, ApiError(429, "rate_limited", message))

    @api.exception_handler(InvalidTask)
    def refused(request: HttpRequest, error: InvalidTask) -> HttpResponse:
        return answer(api, request, refusal(error))

    @api.exception_handler(Http404)
    def absent(request: HttpRequest, error: Http404) -> HttpResponse:
        return answer(api, request, ApiError(404, "not_found", str(error) or "Not found."))

    @api.exception_handler(ObjectDoesNotExist)
    def missing(request: HttpRequest, error: ObjectDoesNotExist) -> HttpResponse:
        return answer(api, request, ApiError(404, "not_found", "Not found."))

    @api.exception_handler(PermissionDenied)
    def forbidden(request: HttpRequest, error: PermissionDenied) -> HttpResponse:
        return answer(api, request, ApiError(403, "forbidden", str(error) or "Not allowed."))

    @api.exception_handler(HttpError)
    def http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
        # ninja's own 400 is a body it cannot parse (not JSON): the request is not valid.
        code = "invalid_request" if error.status_code == 400 else "http_error"
        return answer(api, request, ApiError(error.status_code, code, str(error)))

    @api.exception_handler(RequestDataTooBig)
    def too_big(request: HttpRequest, error: RequestDataTooBig) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
        message = f"The request's body is over {limit:,} bytes, the most Loop takes; send less."
        return answer(api, request, ApiError(413, "too_large", message))

    @api.exception_handler(Exception)
    def failed(request: HttpRequest, error: Exception) -> HttpResponse:
        if database_unreachable(error):
            message = "Loop's database did not answer; nothing was changed. Try again shortly."
            unavailable = ApiError(503, "unavailable", message, {"Retry-After": "5"})
            return answer(api, request, unavailable)
        logger.error("The API failed on %s %s", request.method, request.path, exc_info=error)
        message = "Loop failed on this request; the operators have its log. Try again later."
        return answer(api, request, ApiError(500, "internal_error", message))
