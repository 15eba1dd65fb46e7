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
