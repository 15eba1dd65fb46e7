"""The typed refusals of mirror links (each a 400 unless said) and the checks that raise
them; ``services`` applies them in this order: name, regions (``same_region``,
``region_not_allowed``), topic selection (``topics_or_pattern``, ``invalid_pattern``),
start position, the covered topics (``topic_not_found``, ``source_is_copy``) and their
copies (``target_topic_exists``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from controlplane.core.errors import InvalidRequest
from controlplane.core.validators import SLUG_RE, slug_validator
from controlplane.mirrors.choices import Direction, StartPosition
from controlplane.mirrors.models import MAX_PATTERN_LENGTH, pattern_problem
from controlplane.regions.models import Region
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import allowed_regions
from controlplane.topics.models import Topic


class SameRegion(InvalidRequest):
    code = "same_region"

    def __init__(self, region: Region) -> None:
        message = f"source and target are both region {region.name!r}: a link joins two regions"
        super().__init__(message, target_region=[message])


class RegionNotAllowed(InvalidRequest):
    """The tenant may use only its home region and the regions a platform administrator
    gave it (``Tenant.regions``)."""

    code = "region_not_allowed"

    def __init__(self, tenant: Tenant, field: str, region: str) -> None:
        message = f"tenant {tenant.slug} has no quota in region {region}"
        super().__init__(message, **{field: [message]}, region=region)


class TopicsOrPattern(InvalidRequest):
    code = "topics_or_pattern"

    def __init__(self) -> None:
        message = "name the topics or give a topic_pattern: exactly one of the two"
        super().__init__(message, topics=[message], topic_pattern=[message])


class InvalidPattern(InvalidRequest):
    code = "invalid_pattern"

    def __init__(self, pattern: str, reason: str) -> None:
        message = f"{pattern!r} is not a topic pattern (a glob: *, ?, [...]): {reason}"
        super().__init__(f"topic_pattern: {message}", topic_pattern=[message])


class TopicNotFound(InvalidRequest):
    """A named topic is not the tenant's in the source region: another tenant's answers
    exactly like a missing one."""

    code = "topic_not_found"

    def __init__(self, tenant: Tenant, region: Region, names: list[str]) -> None:
        messages = [f"no topic {n!r} in tenant {tenant.slug!r} in region {region.name!r}"
                    for n in names]  # fmt: skip
        super().__init__(f"topics: {messages[0]}", topics=messages)


class SourceIsCopy(InvalidRequest):
    """A link copies origin topics of its source region only: a mirror copy there (made
    by another link) is not a source. The workers copy only records produced in their
    from region, so records travel one hop and a topology is a star around each
    topic's origin region."""

    code = "source_is_copy"

    def __init__(self, region: Region, names: list[str]) -> None:
        messages = [f"{n!r} in region {region.name!r} is a mirror copy, not an origin topic: "
                    "mirror it from its origin region" for n in names]  # fmt: skip
        super().__init__(f"topics: {messages[0]}", topics=messages)


class TargetTopicExists(InvalidRequest):
    """The target region has a topic of that name that this link did not make (an
    origin, or another link's copy)."""

    code = "target_topic_exists"

    def __init__(self, topic: Topic, region: Region) -> None:
        message = (
            f"region {region.name!r} already has a topic {topic.full_name!r} that is not "
            "a copy made by this link"
        )
        super().__init__(f"topics: {message}", topics=[message], topic=topic.full_name)


def check_name(name: object) -> None:
    if not isinstance(name, str) or not re.match(SLUG_RE, name):
        rule = str(slug_validator.message)
        raise InvalidRequest(f"name: {rule}", name=[rule])


def resolve_region(tenant: Tenant, field: str, region: Region | str) -> Region:
    """The region named ``region`` that ``tenant`` may use (``RegionNotAllowed``
    otherwise, a region that does not exist included: the answer is the same)."""
    found = region if isinstance(region, Region) else Region.objects.filter(name=region).first()
    if found is None or found.pk not in allowed_regions(tenant):
        raise RegionNotAllowed(tenant, field, str(region))
    return found


def check_regions(source: Region, target: Region) -> None:
    if source.pk == target.pk:
        raise SameRegion(source)


def check_selection(topics: object, pattern: object) -> None:
    """Exactly one of a list of short names and a glob pattern
    (``models.pattern_problem``)."""
    if not isinstance(pattern, str):
        raise InvalidPattern(str(pattern), f"a string of at most {MAX_PATTERN_LENGTH} characters")
    if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
        message = "a list of topic names (without the tenant prefix)"
        raise InvalidRequest(f"topics: {message}", topics=[message])
    if bool(topics) == bool(pattern):
        raise TopicsOrPattern()
    problem = pattern_problem(pattern) if pattern else ""
    if problem:
        raise InvalidPattern(pattern[:MAX_PATTERN_LENGTH], problem)


def check_choices(direction: object, start_position: object) -> None:
    if direction not in Direction.values:
        message = f"one of {', '.join(Direction.values)}"
        raise InvalidRequest(f"direction: {message}", direction=[message])
    if start_position not in StartPosition.values:
        message = f"one of {', '.join(StartPosition.values)}"
        raise InvalidRequest(f"start_position: {message}", start_position=[message])


def short_names(tenant: Tenant, names: Iterable[str]) -> list[str]:
    """Names without the tenant prefix (``acme.orders`` and ``orders`` are one topic)."""
    prefix = f"{tenant.slug}."
    return [n[len(prefix):] if n.startswith(prefix) else n for n in names]  # fmt: skip
