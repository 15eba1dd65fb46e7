"""Databus: the sidecar agent that takes applications' writes over local gRPC and HTTP,
spools them durably and sends them to their topics in large batches, under configuration
it watches on the control plane (``databus.config``) and applies live."""

from databus.client import Client, DatabusError, WriteResult

__all__ = ["Client", "DatabusError", "WriteResult"]
