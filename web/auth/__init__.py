"""Signing people in to the console: OpenID Connect authorization code + PKCE through
mozilla-django-oidc against the configured identity provider (Keycloak, or the control
plane's local issuer), the access token kept and refreshed in the Django session, and
logout that ends the provider's session too."""
