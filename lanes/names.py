"""Lane names and the names derived from them.

- A lane's name follows the rule of the platform's other names (tenant slugs): 3-32
  characters, lowercase letters, digits and single ``-``, starting with a letter and
  ending with a letter or digit.
- Lane topic: ``<trunk topic>~<lane>`` (``acme.orders~ppe``). A trunk topic's name never
  holds ``~``, so the split is unambiguous.
- Lane consumer group: ``<group>~<lane>`` (``billing~ppe``); its *trunk group* is
  ``billing``. A trunk group and its lane groups form a *family* that shares a group
  coordinator (the brokers place a group by its trunk group id).
- The header ``x-lane`` carries a record's lane, as UTF-8.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

LANE_HEADER = "x-lane"
SEPARATOR = "~"
LANE_NAME_RE = re.compile(r"\A(?!.*--)[a-z][a-z0-9-]{1,30}[a-z0-9]\Z")
LANE_NAME_RULE = (
    "3-32 characters: lowercase letters, digits and single '-', starting with a letter "
    "and ending with a letter or digit"
)


class InvalidLaneNameError(ValueError):
    """A lane name (or a header's lane) that breaks ``LANE_NAME_RULE``."""

    def __init__(self, name: object) -> None:
        super().__init__(f"invalid lane name {name!r}: {LANE_NAME_RULE}")
        self.name = name


def check_lane_name(name: str) -> str:
    """``name`` if it is a valid lane name; ``InvalidLaneNameError`` otherwise."""
    if not isinstance(name, str) or not LANE_NAME_RE.match(name):
        raise InvalidLaneNameError(name)
    return name


def lane_topic(trunk_topic: str, lane: str) -> str:
    """The lane topic of ``trunk_topic`` for ``lane`` (``acme.orders`` → ``acme.orders~ppe``)."""
    if SEPARATOR in trunk_topic:
        raise ValueError(f"{trunk_topic!r} is already a lane topic")
    return f"{trunk_topic}{SEPARATOR}{check_lane_name(lane)}"


def split_topic(topic: str) -> tuple[str, str | None]:
    """``(trunk topic, lane)``; lane is None for a trunk topic."""
    trunk, sep, lane = topic.partition(SEPARATOR)
    return (trunk, lane) if sep else (topic, None)


def is_lane_topic(topic: str) -> bool:
    return SEPARATOR in topic


def lane_group(group_id: str, lane: str) -> str:
    """The consumer group of ``lane`` for trunk group ``group_id``."""
    if SEPARATOR in group_id:
        raise ValueError(f"{group_id!r} is already a lane group")
    return f"{group_id}{SEPARATOR}{check_lane_name(lane)}"


def split_group(group_id: str) -> tuple[str, str | None]:
    """``(trunk group, lane)``; lane is None for a trunk group."""
    trunk, sep, lane = group_id.partition(SEPARATOR)
    return (trunk, lane) if sep else (group_id, None)


def trunk_group(group_id: str) -> str:
    return split_group(group_id)[0]


def lane_of_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> str | None:
    """The lane named by an ``x-lane`` header (the last one wins), or None.

    ``InvalidLaneNameError`` if the header's value is not a valid lane name.
    """
    lane: str | None = None
    for key, value in headers or ():
        if key == LANE_HEADER:
            try:
                lane = (value or b"").decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidLaneNameError(value) from None
    return None if lane is None else check_lane_name(lane)


def with_lane_header(
    headers: Iterable[tuple[str, bytes | None]] | None, lane: str
) -> list[tuple[str, bytes | None]]:
    """``headers`` carrying exactly one ``x-lane`` header, naming ``lane``.

    Headers other than ``x-lane`` keep their order; an ``x-lane`` header already naming
    ``lane`` keeps its place (a record is never given a second one); ``x-lane`` headers
    naming another lane are replaced by one naming ``lane``, at the end.
    """
    value = check_lane_name(lane).encode("utf-8")
    items = list(headers or ())
    lanes_named = [v for k, v in items if k == LANE_HEADER]
    if lanes_named == [value]:
        return items
    out = [(k, v) for k, v in items if k != LANE_HEADER]
    out.append((LANE_HEADER, value))
    return out
