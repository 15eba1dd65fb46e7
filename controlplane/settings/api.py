"""Django REST Framework and the OpenAPI document."""

from controlplane.settings.env import env

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlplane.accounts.authentication.BearerTokenAuthentication"
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.core.permissions.IsAuthenticatedActor"],
    "DEFAULT_PAGINATION_CLASS": "controlplane.core.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "controlplane.core.api.schema.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.core.api.errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # DRF's JSON parser with a bound on nesting depth (bodies are bounded in size by
    # DATA_UPLOAD_MAX_MEMORY_SIZE, Django's default of 2.5 MiB).
    "DEFAULT_PARSER_CLASSES": ["controlplane.core.api.parsers.JSONParser"],
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Meridian control plane API",
    "DESCRIPTION": "Tenants, regions, clusters, brokers, topics, quotas and service accounts.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The document is public: served without reading any Authorization header.
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
}

API_BASE_URL = env("MERIDIAN_API_BASE_URL", "http://127.0.0.1:8000")
