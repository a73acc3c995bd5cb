"""The Files panel's URLs: /files/ (the workspace), /files/upload/, /files/raw/<path>, and the
changes, each a POST under /files/."""

urlpatterns: list = []
