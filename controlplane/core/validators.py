"""Field validators shared by every app."""

from django.core.validators import RegexValidator

# "--" never appears: it separates the tenant from the name in a service account's
# client id (``<tenant>--<name>``), which must name one tenant's account only.
SLUG_RE = r"\A(?!.*--)[a-z][a-z0-9-]{1,30}[a-z0-9]\Z"
slug_validator = RegexValidator(
    SLUG_RE,
    "3-32 characters: lowercase letters, digits and single '-', starting with a letter "
    "and ending with a letter or digit",
)


def tenant_of_name(name: str) -> str | None:
    """The tenant slug a broker-kept name names (``<tenant>.<name>``: consumer groups,
    transactional ids, producer groups), None for none (internal ``__`` names too)."""
    slug, dot, rest = name.partition(".")
    return slug if dot and slug and rest and not name.startswith("__") else None
