"""Django itself: apps, middleware, security, logging."""

from controlplane.settings.env import as_bool, as_list, env

SECRET_KEY = env("MERIDIAN_SECRET_KEY", "insecure-development-key-change-me")
DEBUG = env("MERIDIAN_DEBUG", False, as_bool)
ALLOWED_HOSTS = env("MERIDIAN_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"], as_list)

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "controlplane.core",
    "controlplane.tenants",
    "controlplane.regions",
    "controlplane.topics",
    "controlplane.quotas",
    "controlplane.accounts",
    "controlplane.provisioning",
    "controlplane.groups",
    "web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "web.middleware.ContentSecurityPolicyMiddleware",
    "web.middleware.ConsoleErrorMiddleware",
]

# The console (``web``): server-rendered templates, static files served by the control
# plane itself through WhiteNoise, straight from the apps' static folders (no
# collectstatic step for the demo), sessions in the database.
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csrf",
                "web.context.console",
            ],
        },
    }
]
STATIC_URL = "console/static/"
WHITENOISE_USE_FINDERS = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env("MERIDIAN_SESSION_COOKIE_SECURE", False, as_bool)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"

ROOT_URLCONF = "controlplane.urls"
# Refusals Django makes itself answer in the API's error shape (as handler400-500 do);
# the console's forms get the console's page (which defers to the API's view elsewhere).
CSRF_FAILURE_VIEW = "web.views.errors.csrf_failure"
WSGI_APPLICATION = "controlplane.wsgi.application"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
APPEND_SLASH = False

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("MERIDIAN_LOG_LEVEL", "INFO")},
}
