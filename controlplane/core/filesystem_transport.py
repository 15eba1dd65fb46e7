"""kombu's filesystem transport (the demo's Celery broker) with atomic message files.

kombu's ``Channel._put`` creates a message file and then writes it, while ``_get`` takes
any file of the queue's name and reads it without a lock: a worker polling at that
moment reads an empty file and dies on the JSON error. Here a message is written under
a name ``_get`` never takes (a leading dot and a ``.part`` suffix) and renamed into
place whole, so a reader sees all of it or nothing.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(partial, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
