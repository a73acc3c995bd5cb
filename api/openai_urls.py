"""The OpenAI-compatible API's addresses (/v1/), outside the pages' login as /api/v1/'s are: a
request is its key's person or nobody."""

from api.openai_compat import openai_api
from api.urls import keyed

patterns, app_name, namespace = openai_api.urls
urlpatterns = keyed(list(patterns))
