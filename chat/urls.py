from django.urls import path

from chat import views, waiting

app_name = "chat"
urlpatterns = [
    path("", views.home, name="home"),
    path("search/", views.search, name="search"),
    path("archived/", views.archived, name="archived"),
    path("conversations/more/", views.more, name="more"),
    path("waiting/", waiting.waiting, name="waiting"),
    path("send/", views.start, name="start"),
    path("c/<int:conversation_id>/", views.conversation, name="conversation"),
    path("c/<int:conversation_id>/send/", views.send, name="send"),
    path("c/<int:conversation_id>/after/", views.turns_after, name="after"),
    path("queued/<int:task_id>/now/", views.queued_now, name="queued_now"),
    path("queued/<int:task_id>/remove/", views.queued_remove, name="queued_remove"),
    path("c/<int:conversation_id>/rename/", views.rename, name="rename"),
    path("c/<int:conversation_id>/delete/", views.delete, name="delete"),
    path("c/<int:conversation_id>/instructions/", views.instructions, name="instructions"),
    path("c/<int:conversation_id>/menu/", views.menu, name="menu"),
    path("c/<int:conversation_id>/pin/", views.pin, name="pin"),
    path("c/<int:conversation_id>/archive/", views.archive, name="archive"),
    path("c/<int:conversation_id>/export.<slug:kind>", views.export, name="export"),
    path("runs/<int:run_id>/", views.run_fragment, name="run"),
    path("runs/<int:run_id>/stop/", views.stop, name="stop"),
    path("runs/<int:run_id>/continue/", views.continue_run, name="continue"),
    path("runs/<int:run_id>/decide/", views.decide, name="decide"),
    path("waiting/count/", views.waiting_count, name="waiting_count"),
    path("runs/<int:run_id>/feedback/", views.feedback, name="feedback"),
    path("runs/<int:run_id>/regenerate/", views.regenerate, name="regenerate"),
    path("runs/<int:run_id>/edit/", views.edit, name="edit"),
    path("runs/<int:run_id>/show/", views.show, name="show"),
    path("runs/<int:run_id>/events/<int:seq>/<slug:key>/", views.event_text, name="event_text"),
]
