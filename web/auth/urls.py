"""``/console/auth/``: sign-in, the provider's callback, logout, and the pages around
them."""

from django.urls import path

from web.auth import views
from web.auth.oidc import ConsoleCallbackView, ConsoleLoginView

urlpatterns = [
    path("login", ConsoleLoginView.as_view(), name="console-auth-login"),
    path("callback", ConsoleCallbackView.as_view(), name="console-auth-callback"),
    path("logout", views.ConsoleLogoutView.as_view(), name="console-auth-logout"),
    path("session", views.session_page, name="console-auth-session"),
    path("failed", views.failed, name="console-auth-failed"),
    path("signed-out", views.signed_out, name="console-auth-signed-out"),
]
