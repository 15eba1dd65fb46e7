"""Django itself: apps, middleware, security, logging."""

from controlplane.settings.env import as_bool, as_list, env

SECRET_KEY = env("MERIDIAN_SECRET_KEY", "insecure-development-key-change-me")
DEBUG = env("MERIDIAN_DEBUG", False, as_bool)
ALLOWED_HOSTS = env("MERIDIAN_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"], as_list)

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "controlplane.core",
    "controlplane.tenants",
    "controlplane.regions",
    "controlplane.topics",
    "controlplane.lanes",
    "controlplane.quotas",
    "controlplane.accounts",
    "controlplane.provisioning",
    "controlplane.groups",
    "controlplane.transactions",
    "controlplane.metrics",
    "controlplane.databus",
    "controlplane.exports",
    "controlplane.indexes",
    "controlplane.mirrors",
    "controlplane.delays",
    "controlplane.retries",
]

# The console's session, CSRF and sign-in middleware join these in settings/console.py.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
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
