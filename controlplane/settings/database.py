"""The desired-state store: Postgres (SQLite only for the embedded demo)."""

from controlplane.settings.env import database_from_url, env

DATABASES = {"default": database_from_url(env("MERIDIAN_DATABASE_URL"))}
