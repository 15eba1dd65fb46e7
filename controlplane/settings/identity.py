"""Identity: Keycloak (``MERIDIAN_IDENTITY=keycloak``) or the control plane's own
issuer (``local``, the embedded demo). Both hand out RS256 tokens with the same claims."""

from django.core.exceptions import ImproperlyConfigured

from controlplane.settings.env import as_bool, env

IDENTITY_PROVIDER = env("MERIDIAN_IDENTITY", "local")
# Audience every API (and, later, broker) token must carry.
TOKEN_AUDIENCE = env("MERIDIAN_TOKEN_AUDIENCE", "meridian")
JWKS_CACHE_S = env("MERIDIAN_JWKS_CACHE_S", 300, int)

KEYCLOAK_URL = env("MERIDIAN_KEYCLOAK_URL", "http://127.0.0.1:8080")
KEYCLOAK_REALM = env("MERIDIAN_KEYCLOAK_REALM", "meridian")
KEYCLOAK_ADMIN_USER = env("MERIDIAN_KEYCLOAK_ADMIN_USER", "admin")
KEYCLOAK_ADMIN_PASSWORD = env("MERIDIAN_KEYCLOAK_ADMIN_PASSWORD", "admin")

# The local issuer's name (its tokens' ``iss``); its keys live in the database, their
# private half sealed with the key-encryption key in this file (default
# <DATA_DIR>/local-issuer-kek, made 0600 on first use): keep it out of database backups.
LOCAL_ISSUER = env("MERIDIAN_LOCAL_ISSUER", "meridian-local")
LOCAL_ISSUER_KEY_FILE = env("MERIDIAN_LOCAL_ISSUER_KEY_FILE", "")
LOCAL_TOKEN_TTL_S = env("MERIDIAN_LOCAL_TOKEN_TTL_S", 3600, int)
# The longest an access token may live (the local issuer's TTL, Keycloak's access-token
# lifespan): brokers are told of a deleted service account for this long, so every token
# it held has expired before they forget it.
MAX_TOKEN_LIFETIME_S = env("MERIDIAN_MAX_TOKEN_LIFETIME_S", 86400, int)
if LOCAL_TOKEN_TTL_S > MAX_TOKEN_LIFETIME_S:
    raise ImproperlyConfigured(
        f"MERIDIAN_LOCAL_TOKEN_TTL_S ({LOCAL_TOKEN_TTL_S}) exceeds "
        f"MERIDIAN_MAX_TOKEN_LIFETIME_S ({MAX_TOKEN_LIFETIME_S})"
    )

# The local issuer's sign-in form: a username, or a client address, with this many
# failed sign-ins within the window is refused (even with the right password) until the
# window ends: password guessing costs a window per few tries.
LOCAL_SIGN_IN_FAILURES_PER_USERNAME = env("MERIDIAN_LOCAL_SIGN_IN_FAILURES_PER_USERNAME", 5, int)
LOCAL_SIGN_IN_FAILURES_PER_ADDRESS = env("MERIDIAN_LOCAL_SIGN_IN_FAILURES_PER_ADDRESS", 20, int)
LOCAL_SIGN_IN_WINDOW_S = env("MERIDIAN_LOCAL_SIGN_IN_WINDOW_S", 900, int)

# The cluster's own callers (the controller, the reconciler, brokers calling brokers) hold
# this realm role; brokers accept their Admin, Replication and peer Metadata calls only.
INTERNAL_ROLE = env("MERIDIAN_INTERNAL_ROLE", "meridian-internal")
# Whether brokers authenticate calls: the control plane then sends internal tokens on its
# broker channels and starts local brokers with the issuer's JWKS.
BROKER_AUTH = env("MERIDIAN_BROKER_AUTH", False, as_bool)
# Secrets of the internal clients (meridian-controller, meridian-broker). Keycloak: read
# from the realm when unset. Local issuer: one secret in this file (default
# <DATA_DIR>/internal-client-secret), made on first use.
CONTROLLER_CLIENT_SECRET = env("MERIDIAN_CONTROLLER_CLIENT_SECRET", "")
BROKER_CLIENT_SECRET = env("MERIDIAN_BROKER_CLIENT_SECRET", "")
INTERNAL_CLIENT_SECRET_FILE = env("MERIDIAN_INTERNAL_CLIENT_SECRET_FILE", "")
# TLS towards brokers: the CA their certificates are checked with ("": plaintext), and
# the certificate and key local brokers serve with.
BROKER_TLS_CA_FILE = env("MERIDIAN_BROKER_TLS_CA_FILE", "")
BROKER_TLS_CERT_FILE = env("MERIDIAN_BROKER_TLS_CERT_FILE", "")
BROKER_TLS_KEY_FILE = env("MERIDIAN_BROKER_TLS_KEY_FILE", "")
