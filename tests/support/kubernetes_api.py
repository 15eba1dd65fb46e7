"""A stand-in for the Kubernetes API server, for the Kubernetes provisioner's tests:
Kubernetes cannot run on this machine. It serves, over a real socket (HTTP, or HTTPS
with a certificate of ``tests.support.tls``), the calls the provisioner makes, as the
API server answers them: a StatefulSet's ``scale`` subresource (GET, and PATCH with a
merge patch) and pods (GET), requiring the bearer token it was given. It plays the
StatefulSet controller too: scaling up creates the missing ordinals' pods (in
``pod_status`` for their ordinal, running and ready by default), scaling down deletes
the highest ordinals' pods first — at once, or, with ``graceful``, by marking them
terminating (a ``deletionTimestamp``) until ``finish_terminating()``, as a kubelet
does once their containers exited; ``pods`` and ``replicas`` may be changed by a test
to stand for what Kubernetes did meanwhile. Every request is kept in ``requests``.

Faults of a failing or misbehaving API server, for the next requests: ``fault =
"stall"`` sends the headers and then nothing (until the server stops), ``"truncate"``
sends half the body announced and closes the connection; ``rewrite(request, body)``
changes an answer's body before it is sent (shapes the API does not answer).

    with FakeKubernetes(namespace="meridian", token="t0k", statefulsets={"broker-main": 0}) as k8s:
        k8s.url                                  # http://127.0.0.1:PORT
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.tls import TlsFiles

SCALE = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/statefulsets/([^/]+)/scale$")
POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)$")


def running() -> dict[str, Any]:
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "broker", "ready": True, "state": {"running": {}}}],
    }


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {
        "phase": "Pending" if reason == "ContainerCreating" else "Running",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {"name": "broker", "ready": False,
             "state": {"waiting": {"reason": reason, "message": message}}}
        ],
    }  # fmt: skip


@dataclass
class Request:
    method: str
    path: str
    authorization: str
    content_type: str
    body: Any


@dataclass
class FakeKubernetes:
    namespace: str
    token: str
    statefulsets: dict[str, int]  # name -> replicas
    tls: TlsFiles | None = None
    pod_status: dict[int, dict[str, Any]] = field(default_factory=dict)  # ordinal -> status
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    graceful: bool = False
    fault: str | None = None  # "stall" or "truncate" (the module docstring)
    rewrite: Callable[[Request, Any], Any] | None = None
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        for name, replicas in self.statefulsets.items():
            self._reconcile(name, replicas)

    # -- the StatefulSet controller -------------------------------------------------------
    def _reconcile(self, statefulset: str, replicas: int) -> None:
        self.statefulsets[statefulset] = replicas
        for name in list(self.pods):
            ordinal = int(name.rsplit("-", 1)[1])
            if name.startswith(statefulset + "-") and ordinal >= replicas:
                if self.graceful:
                    self.pods[name]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                else:
                    del self.pods[name]
        for ordinal in range(replicas):
            name = f"{statefulset}-{ordinal}"
            if name not in self.pods:
                status = self.pod_status.get(ordinal, running())
                self.pods[name] = {"metadata": {"name": name, "namespace": self.namespace},
                                   "status": status}  # fmt: skip

    def finish_terminating(self) -> None:
        """The pods marked terminating are gone."""
        with self._lock:
            for name, pod in list(self.pods.items()):
                if pod["metadata"].get("deletionTimestamp"):
                    del self.pods[name]

    # -- HTTP -----------------------------------------------------------------------------
    def answer(self, request: Request) -> tuple[int, Any]:
        code, body = self._answer(request)
        return (code, self.rewrite(request, body)) if self.rewrite is not None else (code, body)

    def _answer(self, request: Request) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(request)
            if request.authorization != f"Bearer {self.token}":
                return 401, {"kind": "Status", "reason": "Unauthorized", "code": 401}
            if (match := SCALE.match(request.path)) and match.group(1) == self.namespace:
                return self._scale(request, match.group(2))
            if (match := POD.match(request.path)) and match.group(1) == self.namespace:
                pod = self.pods.get(match.group(2))
                return (200, pod) if request.method == "GET" and pod else _not_found()
            return _not_found()

    def _scale(self, request: Request, name: str) -> tuple[int, Any]:
        if name not in self.statefulsets:
            return _not_found()
        if request.method == "PATCH":
            if request.content_type != "application/merge-patch+json":
                return 415, {"kind": "Status", "reason": "UnsupportedMediaType", "code": 415}
            self._reconcile(name, int(request.body["spec"]["replicas"]))
        elif request.method != "GET":
            return 405, {"kind": "Status", "reason": "MethodNotAllowed", "code": 405}
        replicas = self.statefulsets[name]
        return 200, {"kind": "Scale", "apiVersion": "autoscaling/v1",
                     "metadata": {"name": name, "namespace": self.namespace},
                     "spec": {"replicas": replicas}, "status": {"replicas": replicas}}  # fmt: skip

    @contextmanager
    def serving(self) -> Iterator[FakeKubernetes]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                request = Request(
                    self.command, self.path, self.headers.get("Authorization", ""),
                    self.headers.get("Content-Type", ""), json.loads(raw) if raw else None,
                )  # fmt: skip
                code, body = fake.answer(request)
                encoded = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(encoded)))
                self.end_headers()
                if fake.fault == "stall":
                    self.wfile.flush()
                    fake._stopping.wait(30)
                    return
                if fake.fault == "truncate":
                    self.wfile.write(encoded[: len(encoded) // 2])
                    self.close_connection = True
                    return
                self.wfile.write(encoded)

            def do_GET(self) -> None:
                self._handle()

            def do_PATCH(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if self.tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls.cert_file, self.tls.key_file)
            server.socket = context.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stopping.set()
            server.shutdown()
            server.server_close()
            thread.join(5)


def _not_found() -> tuple[int, Any]:
    return 404, {"kind": "Status", "reason": "NotFound", "code": 404}
