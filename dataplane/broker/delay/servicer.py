# ruff: noqa: N802 - method names are the RPC names of the protos
"""The Delay service (``delay.proto``): a thin adapter over ``DelayManager``."""

from __future__ import annotations

from typing import Any

from dataplane._gen.meridian.v1 import delay_pb2, delay_pb2_grpc
from dataplane.broker.delay.manager import DelayManager
from dataplane.broker.metrics import BrokerMetrics
from dataplane.broker.services import Readiness, _Instrumented


class DelayServicer(delay_pb2_grpc.DelayServicer, _Instrumented):
    def __init__(self, delay: DelayManager, metrics: BrokerMetrics, readiness: Readiness) -> None:
        super().__init__(metrics, readiness)
        self._delay = delay

    async def CancelDelayed(self, request: delay_pb2.CancelDelayedRequest, context: Any) -> Any:
        return await self._call("CancelDelayed", context, self._delay.cancel(request))

    async def ListDelayed(self, request: delay_pb2.ListDelayedRequest, context: Any) -> Any:
        return await self._call("ListDelayed", context, self._delay.scheduled(request))

    async def DescribeDelay(self, request: delay_pb2.DescribeDelayRequest, context: Any) -> Any:
        work = self._answer(self._delay.describe, request)
        return await self._call("DescribeDelay", context, work)

    async def GetRetryPolicy(self, request: delay_pb2.GetRetryPolicyRequest, context: Any) -> Any:
        work = self._answer(self._delay.retry_policy, request.group_id)
        return await self._call("GetRetryPolicy", context, work)

    async def _answer(self, fn: Any, *args: Any) -> Any:
        return fn(*args)
