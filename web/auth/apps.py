from django.apps import AppConfig


class ConsoleAuthConfig(AppConfig):
    name = "web.auth"
    label = "console_auth"  # "auth" is django.contrib.auth's
    verbose_name = "Console sign-in"
