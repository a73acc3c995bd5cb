"""The API's one NinjaAPI: /api/v1/, its OpenAPI document at /api/v1/openapi.json and its docs
page at /api/v1/docs. Every operation takes a personal API key (api/auth.py) and is held to the
per-key and per-person request rates; every error is JSON (api/errors.py)."""

from api import assistants, events, files, memories, quota, runs, tools
from api.auth import READ, PerKey, PerPerson
from api.documented import DocumentedOnce
from api.errors import install

DESCRIPTION = """Loop's agent for programs: start runs, follow their events live over
Server-Sent Events (resumable with `Last-Event-ID`, or as AG-UI events), decide the calls they wait
on, and reach your workspace files, memories and tools. Authenticate with a personal API key:
`Authorization: Bearer loop_…` (Settings → API keys). Errors are JSON:
`{"error": {"code": "...", "message": "..."}}`."""

api = DocumentedOnce(
    title="Loop API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    auth=READ,
    throttle=[PerKey(), PerPerson()],
    docs_url="/docs",
    openapi_url="/openapi.json",
)
install(api)
for module in (runs, events, files, memories, tools, quota, assistants):
    api.add_router("/", module.router)
