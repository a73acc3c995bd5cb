"""A NinjaAPI whose OpenAPI document is made once per root path: the handlers do not change
while the process lives, and ninja would otherwise build the whole document (tens of ms of
CPU) at each request of /openapi.json or its docs page."""

from typing import Any

from ninja import NinjaAPI
from ninja.openapi.schema import OpenAPISchema


class DocumentedOnce(NinjaAPI):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._documents: dict[str, OpenAPISchema] = {}

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        if path_prefix is None:
            path_prefix = self.get_root_path(path_params or {})
        document = self._documents.get(path_prefix)
        if document is None:
            document = super().get_openapi_schema(path_prefix=path_prefix)
            self._documents[path_prefix] = document
        return document
