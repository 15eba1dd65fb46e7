"""Lanes (swimlanes): named test environments of a tenant that share its topics.

A record tagged with lane ``L`` (header ``x-lane: L``) of trunk topic ``<tenant>.<topic>``
lives in the lane topic ``<tenant>.<topic>~L``; untagged records stay on the trunk. This
package is the pure library of those semantics: names (``lanes.names``), the lane a
record is produced to (``lanes.context``) and a lane's declaration with its orphan
policy (``lanes.model``). It imports nothing else of Meridian, so the SDK, the brokers,
the control plane and Databus all share it.
"""

from lanes.context import current_lane, lane_for_record, processing_lane
from lanes.model import LaneSpec, OrphanPolicy
from lanes.names import (
    LANE_HEADER,
    SEPARATOR,
    InvalidLaneNameError,
    check_lane_name,
    is_lane_topic,
    lane_group,
    lane_of_headers,
    lane_topic,
    split_group,
    split_topic,
    trunk_group,
    with_lane_header,
)

__all__ = [
    "LANE_HEADER",
    "SEPARATOR",
    "InvalidLaneNameError",
    "LaneSpec",
    "OrphanPolicy",
    "check_lane_name",
    "current_lane",
    "is_lane_topic",
    "lane_for_record",
    "lane_group",
    "lane_of_headers",
    "lane_topic",
    "processing_lane",
    "split_group",
    "split_topic",
    "trunk_group",
    "with_lane_header",
]
