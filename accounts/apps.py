"""The accounts app, and the admin's configuration that makes Loop's site the default one."""

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"
    default = True


class LoopAdminConfig(admin_apps.AdminConfig):
    """`django.contrib.admin`, with accounts.sites.LoopAdminSite as `admin.site`."""

    default = False
    default_site = "accounts.sites.LoopAdminSite"
