"""The web console (``/console/``): Django sessions and CSRF, templates, and sign-in with
OpenID Connect (authorization code + PKCE) through mozilla-django-oidc.

The same keys serve Keycloak and the local issuer: the provider's endpoints are not
settings here but come from the identity provider (``IdentityProvider.oidc_endpoints``,
read by ``web.auth.oidc``), so only their URLs differ."""

from pathlib import Path

from controlplane.settings.api import API_BASE_URL
from controlplane.settings.base import INSTALLED_APPS, MIDDLEWARE
from controlplane.settings.env import as_bool, env

# Where people open the console; the provider's redirect URIs are derived from it
# (``<CONSOLE_URL>/auth/callback``, ``<CONSOLE_URL>/auth/signed-out``), so it must be
# the address the browser uses.
CONSOLE_URL = env("MERIDIAN_CONSOLE_URL", f"{API_BASE_URL.rstrip('/')}/console/")
CONSOLE_CLIENT_ID = env("MERIDIAN_CONSOLE_CLIENT_ID", "meridian-console")
# How long a console session lasts at most, and so the local issuer's refresh tokens.
CONSOLE_SESSION_S = env("MERIDIAN_CONSOLE_SESSION_S", 8 * 3600, int)
# An access token this close to its expiry is refreshed before the request goes on.
CONSOLE_TOKEN_REFRESH_MARGIN_S = env("MERIDIAN_CONSOLE_TOKEN_REFRESH_MARGIN_S", 60, int)

INSTALLED_APPS = [
    *INSTALLED_APPS,
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "mozilla_django_oidc",
    "web.auth",
    "web",
]

# Django's order: sessions before common, CSRF and authentication after; the console's
# token refresh once the user is known; its security headers and error pages last.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    *(m for m in MIDDLEWARE if m != "django.middleware.security.SecurityMiddleware"),
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "web.auth.middleware.RefreshAccessToken",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "web.middleware.ContentSecurityPolicyMiddleware",
    "web.middleware.ConsoleErrorMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The console's own templates (web/templates/web/...), and each app's.
        "DIRS": [Path(__file__).resolve().parents[2] / "web" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csrf",
                "django.contrib.auth.context_processors.auth",
                "web.context.console",
            ],
        },
    }
]

# The console's static files (scripts, styles), served by the control plane itself
# through WhiteNoise straight from the apps' static folders (no collectstatic step).
STATIC_URL = "/console/static/"
WHITENOISE_USE_FINDERS = True

# Sessions live in the database (the tokens they hold are too big for a cookie). The
# cookies are HTTP-only and SameSite=Lax; MERIDIAN_SECURE_COOKIES=true (anything served
# over HTTPS) sends them over HTTPS only.
SESSION_COOKIE_AGE = CONSOLE_SESSION_S
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env("MERIDIAN_SECURE_COOKIES", False, as_bool)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
CSRF_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# Refusals Django makes itself answer in the API's error shape (as handler400-500 do);
# the console's forms get the console's page (which defers to the API's view elsewhere).
CSRF_FAILURE_VIEW = "web.views.errors.csrf_failure"

AUTHENTICATION_BACKENDS = ["web.auth.oidc.ConsoleOIDCBackend"]
LOGIN_URL = "/console/auth/login"
LOGIN_REDIRECT_URL = "/console/"
LOGIN_REDIRECT_URL_FAILURE = "/console/auth/failed"
LOGOUT_REDIRECT_URL = "/console/auth/signed-out"

# mozilla-django-oidc. Endpoints: from the identity provider (see the module docstring).
OIDC_RP_CLIENT_ID = CONSOLE_CLIENT_ID
OIDC_RP_CLIENT_SECRET = ""  # a public client: PKCE, not a secret, binds the code
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = "openid profile"
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_STORE_ACCESS_TOKEN = True
OIDC_STORE_ID_TOKEN = True  # the id_token_hint of the provider's logout
OIDC_AUTHENTICATION_CALLBACK_URL = "console-auth-callback"
OIDC_CALLBACK_CLASS = "web.auth.oidc.ConsoleCallbackView"
OIDC_AUTHENTICATE_CLASS = "web.auth.oidc.ConsoleLoginView"
OIDC_OP_LOGOUT_URL_METHOD = "web.auth.oidc.provider_logout_url"
OIDC_TIMEOUT = env("MERIDIAN_OIDC_TIMEOUT_S", 10, int)
