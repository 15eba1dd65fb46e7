"""The answer of a console write whose identity provider call failed.

Service account and member services call the identity provider before they change a row
(and undo it when the row's transaction fails), so when it does not answer nothing has
changed in the tenant. The page says so (503) without the provider's message, which names its
address; the message is logged."""

from __future__ import annotations

import functools
import logging
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.core.errors import Unavailable
from web.access import View

log = logging.getLogger(__name__)


def identity_provider_write(view: View) -> View:
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except Unavailable as exc:
            log.warning("identity provider unavailable at %s: %s", request.path, exc.message)
            return render(request, "web/unavailable.html", status=503)

    return wrapper
