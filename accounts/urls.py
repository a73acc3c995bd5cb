"""Logins: Django's own views for log in and log out (POST only), password change counted by
django-axes like a login, password reset by mail (accounts/resets.py), sign-up, and a person's
own data: export it, or delete the account."""

from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import resets, views
from accounts.forms import LoginForm

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            authentication_form=LoginForm, redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(
            template_name="registration/password_changed.html"
        ),
        name="password_change_done",
    ),
    path("password/reset/", resets.PasswordResetView.as_view(), name="password_reset"),
    path(
        "password/reset/sent/", resets.PasswordResetDoneView.as_view(), name="password_reset_done"
    ),
    path(
        "password/reset/<uidb64>/<token>/",
        resets.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "password/reset/done/",
        resets.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    path("signup/", views.signup, name="signup"),
    path("data/", views.my_data, name="my_data"),
    path("data/export/", views.export, name="my_data_export"),
    path("data/delete/", views.delete, name="my_data_delete"),
    path("data/deleted/", views.deleted, name="account_deleted"),
]
