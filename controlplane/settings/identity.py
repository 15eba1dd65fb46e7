"""Identity: Keycloak (``MERIDIAN_IDENTITY=keycloak``) or the control plane's own
issuer (``local``, the embedded demo). Both hand out RS256 tokens with the same claims."""

from controlplane.settings.env import env

IDENTITY_PROVIDER = env("MERIDIAN_IDENTITY", "local")
# Audience every API (and, later, broker) token must carry.
TOKEN_AUDIENCE = env("MERIDIAN_TOKEN_AUDIENCE", "meridian")
JWKS_CACHE_S = env("MERIDIAN_JWKS_CACHE_S", 300, int)

KEYCLOAK_URL = env("MERIDIAN_KEYCLOAK_URL", "http://127.0.0.1:8080")
KEYCLOAK_REALM = env("MERIDIAN_KEYCLOAK_REALM", "meridian")
KEYCLOAK_ADMIN_USER = env("MERIDIAN_KEYCLOAK_ADMIN_USER", "admin")
KEYCLOAK_ADMIN_PASSWORD = env("MERIDIAN_KEYCLOAK_ADMIN_PASSWORD", "admin")

# The local issuer's name (its tokens' ``iss``); its keys live in the database.
LOCAL_ISSUER = env("MERIDIAN_LOCAL_ISSUER", "meridian-local")
LOCAL_TOKEN_TTL_S = env("MERIDIAN_LOCAL_TOKEN_TTL_S", 3600, int)
