"""(being written)"""

from ninja import Router

router = Router(tags=["memories"])
