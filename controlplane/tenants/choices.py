"""The roles are defined in ``controlplane.core.choices``, under every app; this name stays
for callers outside the control plane's own apps (the demo) until they import from core."""

from controlplane.core.choices import PLATFORM_ADMIN_ROLE, Role

__all__ = ["PLATFORM_ADMIN_ROLE", "Role"]
