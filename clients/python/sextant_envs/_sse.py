"""Server-sent events as the HTML standard defines them, read a line at a time."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, Optional


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: str
    id: Optional[str]

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


def read_events(stream: BinaryIO) -> Iterator[ServerSentEvent]:
    """Each event of `stream` as it arrives; comments (the edge's keep-alives) are skipped."""
    event, data, last_id = "", [], None
    while True:
        raw = stream.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data), last_id)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id" and "\0" not in value:
            last_id = value
