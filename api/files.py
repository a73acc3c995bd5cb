"""(being written)"""

from ninja import Router

router = Router(tags=["files"])
