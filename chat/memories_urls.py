"""The Memories page's URLs: /memories/ and the changes, each a POST under /memories/."""

urlpatterns: list = []
