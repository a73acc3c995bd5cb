"""What the operators' console tells an operator about the site's set-up, which the people's pages
leave out: a person cannot set the model server, an operator can."""

from django import template

from agent.llm.factory import MOCK, offered_models

register = template.Library()


@register.simple_tag
def only_the_mock() -> bool:
    """True when every model offered is the built-in mock: no model server is configured."""
    offered = offered_models()
    return bool(offered) and all(choice.provider == MOCK for choice in offered)
