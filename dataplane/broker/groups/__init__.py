"""Consumer groups in the broker: the group coordinator, its gRPC service and the
``__consumer_offsets`` log it keeps committed offsets and group metadata in.

The broker app wires it in so::

    coordinator = GroupCoordinator(broker_id=..., manager=log_manager, num_partitions=N)
    await coordinator.start(owned_partitions)          # on the server's event loop
    servicer = GroupServicer(coordinator, locate)      # locate(p) -> BrokerInfo | None
    group_pb2_grpc.add_GroupCoordinatorServicer_to_server(servicer, server)
    ...
    await coordinator.stop()                            # before closing the LogManager
"""

from dataplane.broker.groups.coordinator import OFFSETS_TOPIC, GroupConfig, GroupCoordinator
from dataplane.broker.groups.servicer import GroupServicer

__all__ = ["OFFSETS_TOPIC", "GroupConfig", "GroupCoordinator", "GroupServicer"]
