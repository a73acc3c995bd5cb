"""The OpenTelemetry GenAI semantic conventions Loop's spans follow, at a pinned version.

The conventions are still "Development": names move between versions. Loop emits the pinned
version's names, or, when the operator opts in with OTEL_SEMCONV_STABILITY_OPT_IN containing
`gen_ai_latest_experimental` (the switch the OpenTelemetry instrumentations read), the newer
version's. Each is named by its schema URL, set on the tracer, so a backend knows which it reads.
"""

from dataclasses import dataclass

OPT_IN = "gen_ai_latest_experimental"


@dataclass(frozen=True)
class Convention:
    version: str
    provider: str  # the attribute naming the model's provider
    cached_tokens: str | None  # the attribute for prompt tokens read from a cache, if any

    @property
    def schema_url(self) -> str:
        return f"https://opentelemetry.io/schemas/{self.version}"


# v1.36.0: the last version whose provider attribute is gen_ai.system.
PINNED = Convention(version="1.36.0", provider="gen_ai.system", cached_tokens=None)
# v1.37.0: gen_ai.system renamed gen_ai.provider.name; cache reads counted apart.
LATEST = Convention(
    version="1.37.0",
    provider="gen_ai.provider.name",
    cached_tokens="gen_ai.usage.cache_read.input_tokens",
)


def convention(opt_in: list[str]) -> Convention:
    """The convention OTEL_SEMCONV_STABILITY_OPT_IN (as its list of values) selects."""
    return LATEST if OPT_IN in opt_in else PINNED
