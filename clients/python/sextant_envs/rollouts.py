"""Rollout runs: the edge plays a policy on a task set's tasks in groups, verifies each rollout and
computes each group's advantages, streaming it all as server-sent events."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._errors import STATUS_BY_CODE, SextantConnectionError, SextantError
from ._http import Transport


def segment(value: str) -> str:
    return urllib.parse.quote(str(value), safe="")


@dataclass(frozen=True)
class RolloutEvent:
    """One event of a rollout run: `type` (`rollout.started`, `rollout.ended` with the member's
    `reward` and `components`, `group.ended` with the group's `rewards` and `advantages`, `summary`),
    its id in the run's stream, when it happened (`at`), and its `data`."""

    type: str
    id: Optional[str]
    data: Any
    at: Optional[str] = None


class RolloutRun:
    """A rollout run's events as they arrive. Iterate it for the events; `summary` holds the final
    summary once the stream has delivered it, and `result()` reads to the end and returns it. A
    broken stream resumes from the last event it delivered (`Last-Event-ID`)."""

    def __init__(
        self,
        transport: Transport,
        body: Optional[Dict[str, Any]],
        max_reconnects: int,
        run_id: Optional[str] = None,
        after: Optional[str] = None,
    ) -> None:
        self._t = transport
        self._body = body
        self._max_reconnects = max_reconnects
        self._started = False
        self.id = run_id
        self.last_event_id = after
        self.summary: Optional[Dict[str, Any]] = None
        self.events: List[RolloutEvent] = []

    def __iter__(self) -> Iterator[RolloutEvent]:
        if self._started:
            raise RuntimeError("a rollout run's events are read once; its `events` list keeps them")
        self._started = True
        failures = 0
        while True:
            if self.id is None:
                if self.last_event_id is not None:
                    raise SextantConnectionError(
                        "the rollout stream broke before it named its run, so it cannot be resumed"
                    )
                stream = self._t.stream("POST", "/v1/envs/rollouts", self._body, on_open=self._named)
            else:
                stream = self._t.stream(
                    "GET", f"/v1/envs/rollouts/{segment(self.id)}/events", last_event_id=self.last_event_id
                )
            try:
                for sse in stream:
                    if sse.event == "error":
                        error = _stream_error(sse.json())
                        if error.status != 503:
                            raise error
                        raise SextantConnectionError(f"the rollout stream ended with {error}")
                    event = _rollout_event(sse.event, sse.id, sse.json())
                    if sse.id is not None:
                        self.last_event_id = sse.id
                    failures = 0
                    self.events.append(event)
                    yield event
                    if event.type == "summary":
                        self.summary = event.data
                        return
                raise SextantConnectionError("the rollout stream ended before its summary")
            except SextantConnectionError:
                failures += 1
                if failures > self._max_reconnects or self.id is None:
                    raise
                self._t.sleep(min(0.5 * 2 ** (failures - 1), 8.0))
            finally:
                stream.close()

    def _named(self, headers: Mapping[str, str]) -> None:
        # The run's id comes in the answer's Location, /v1/envs/rollouts/{id}.
        location = headers.get("Location") or ""
        if location.rstrip("/"):
            self.id = urllib.parse.unquote(location.rstrip("/").rsplit("/", 1)[-1])

    def result(self) -> Dict[str, Any]:
        """Reads the stream to its end; the summary."""
        if not self._started:
            for _ in self:
                pass
        if self.summary is None:
            raise SextantConnectionError("the rollout stream did not deliver its summary")
        return self.summary


class Rollouts:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def run(
        self,
        taskset: str,
        policy: Mapping[str, Any],
        group_size: int,
        sampling: Optional[Mapping[str, Any]] = None,
        tasks: Optional[Sequence[Union[int, str]]] = None,
        limits: Optional[Mapping[str, Any]] = None,
        concurrency: Optional[int] = None,
        max_reconnects: int = 8,
    ) -> RolloutRun:
        """Has the edge run `group_size` rollouts of each task (all of the set's, or `tasks`) with
        the production agent loop on `policy["model"]` (a model the edge's gateway serves), verify
        each, and compute each group's advantages; `concurrency` bounds the rollouts in flight. The
        request is sent when the result is first iterated.

            run = client.rollouts.run("ts_…", {"model": "my-policy"}, group_size=8,
                                      sampling={"temperature": 1.0})
            for event in run:
                if event.type == "rollout.ended": print(event.data["reward"])
            print(run.summary)
        """
        body: Dict[str, Any] = {
            "taskset": taskset,
            "policy": dict(policy),
            "group_size": group_size,
            "sampling": dict(sampling or {}),
        }
        if tasks is not None:
            body["tasks"] = list(tasks)
        if limits is not None:
            body["limits"] = dict(limits)
        if concurrency is not None:
            body["concurrency"] = concurrency
        return RolloutRun(self._t, body, max_reconnects)

    def get(self, run_id: str) -> Dict[str, Any]:
        """A rollout run's state: its members so far, and its summary once it has ended."""
        return self._t.request("GET", f"/v1/envs/rollouts/{segment(run_id)}")[1]

    def events(self, run_id: str, after: Optional[str] = None, max_reconnects: int = 8) -> RolloutRun:
        """A run's events from after event `after` (from its first without), as `run` gives them:
        for a trainer that lost its process, or a second reader."""
        return RolloutRun(self._t, None, max_reconnects, run_id=run_id, after=after)


def _rollout_event(kind: str, sse_id: Optional[str], body: Any) -> RolloutEvent:
    # Each event's JSON is the whole event, `{id, type, at, data}`.
    if isinstance(body, Mapping) and "data" in body:
        return RolloutEvent(str(body.get("type") or kind), sse_id, body["data"], body.get("at"))
    return RolloutEvent(kind, sse_id, body)


def _stream_error(data: Any) -> SextantError:
    data = data if isinstance(data, Mapping) else {}
    code = str(data.get("code") or "internal")
    return SextantError(code, STATUS_BY_CODE.get(code), str(data.get("detail") or ""), data.get("instance"))
