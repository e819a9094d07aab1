"""Sextant environments from Python: sessions a trainer steps itself, rollouts the edge runs, and
the task sets both draw from."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._errors import SextantError
from ._http import Transport
from .rollouts import Rollouts, segment

ToolCall = Mapping[str, Any]


class Client:
    """A client of one Sextant edge under one API key.

    `base_url` defaults to `SEXTANT_URL`, `api_key` to `SEXTANT_API_KEY`. `timeout` bounds each
    request: a step waits for its tool calls (a command may run for minutes) and `verify` for the
    task's tests, so it is long. A 429 or 503 is retried after its `Retry-After` (at most
    `max_retry_wait` seconds; a longer wait raises the error for the caller to schedule), up to
    `max_retries` times.

    Make one client per process or per Ray actor; a client keeps no connection between requests.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 1200.0,
        max_retries: int = 5,
        max_retry_wait: float = 60.0,
    ) -> None:
        base_url = base_url or os.environ.get("SEXTANT_URL")
        api_key = api_key or os.environ.get("SEXTANT_API_KEY")
        if not base_url:
            raise ValueError("No edge URL: pass base_url or set SEXTANT_URL.")
        if not api_key:
            raise ValueError("No API key: pass api_key or set SEXTANT_API_KEY.")
        self._transport = Transport(base_url, api_key, timeout, max_retries, max_retry_wait)
        self.sessions = Sessions(self._transport)
        self.rollouts = Rollouts(self._transport)
        self.tasksets = Tasksets(self._transport)

    @property
    def base_url(self) -> str:
        return self._transport.base_url

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"




# ---------------------------------------------------------------------------------------------- tasksets


class Tasksets:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def get(self, taskset_id: str) -> Dict[str, Any]:
        """The task set's manifest: its tasks' hashes, sizes and honoured settings, by index."""
        return self._t.request("GET", f"/v1/envs/tasksets/{segment(taskset_id)}")[1]


# ---------------------------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class StepResult:
    """A step's answer: one `{"role": "tool", "tool_call_id", "content"}` message per call, ready to
    append to the conversation; `done` once `finish` was called or a budget is spent (`reason`)."""

    index: int
    results: List[Dict[str, Any]]
    done: bool
    reason: Optional[str]
    usage: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class VerifyResult:
    """The task's tests' verdict: `reward` and its named `components`, and the tests' log (capped)."""

    reward: float
    components: Dict[str, float]
    log: str
    raw: Dict[str, Any] = field(repr=False)


class Sessions:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def create(
        self,
        taskset: str,
        task: Union[int, str],
        seed: Optional[int] = None,
        limits: Optional[Mapping[str, Any]] = None,
    ) -> "Session":
        """Starts a session on one task of a task set (`task`: its index or its archive's sha256):
        a sandbox holding the task's environment, the production agent's tools, and the first
        observation (the system prompt and the task's instruction)."""
        body: Dict[str, Any] = {"taskset": taskset, "task": task}
        if seed is not None:
            body["seed"] = seed
        if limits is not None:
            body["limits"] = dict(limits)
        _, created = self._t.request("POST", "/v1/envs/sessions", body)
        return Session(self._t, created)

    def get(self, session_id: str) -> Dict[str, Any]:
        """A session's state."""
        return self._t.request("GET", f"/v1/envs/sessions/{segment(session_id)}")[1]


class Session:
    """One episode in one sandbox. Use it from one thread at a time; `with` closes it.

    `tools` are the OpenAI tool schemas to offer the policy, `observation["messages"]` the
    conversation's start. `step` sends the policy's tool calls and answers their results.
    """

    def __init__(self, transport: Transport, created: Dict[str, Any]) -> None:
        self._t = transport
        self.id: str = created["id"]
        self.status: str = created.get("status", "")
        self.tools: List[Dict[str, Any]] = created.get("tools", [])
        self.observation: Dict[str, Any] = created.get("observation", {})
        self.limits: Dict[str, Any] = created.get("limits", {})
        self.raw = created
        # The last step the edge has run; the next is one more.
        self.index: int = created.get("steps", 0)
        self.done: bool = bool(created.get("done", False))
        self.reason: Optional[str] = created.get("reason")
        self.closed = False

    @property
    def messages(self) -> List[Dict[str, Any]]:
        """The conversation's first messages: the system prompt and the task's instruction."""
        return list(self.observation.get("messages", []))

    def _path(self, suffix: str = "") -> str:
        return f"/v1/envs/sessions/{segment(self.id)}{suffix}"

    def step(
        self,
        tool_calls: Sequence[Any],
        index: Optional[int] = None,
        content: Optional[str] = None,
    ) -> StepResult:
        """Runs the policy's tool calls as the production agent loop runs them, and answers their
        results.

        `tool_calls` are OpenAI tool calls (`{"id", "type": "function", "function": {"name",
        "arguments"}}`; `arguments` may be a dict; objects with `model_dump()`, such as the openai
        package's, are taken too). `index` defaults to the step after the last one; a request whose
        answer is lost is sent again with the same index, and the edge answers the step it already
        ran instead of running its calls twice. `content` is the assistant's text beside the calls.
        """
        number = self.index + 1 if index is None else index
        body: Dict[str, Any] = {
            "index": number,
            "tool_calls": [_tool_call(call, number, i) for i, call in enumerate(tool_calls)],
        }
        if content is not None:
            body["content"] = content
        _, answer = self._t.request("POST", self._path("/step"), body, idempotent=True)
        result = StepResult(
            index=answer.get("index", number),
            results=answer.get("results", []),
            done=bool(answer.get("done", False)),
            reason=answer.get("reason"),
            usage=answer.get("usage") or {},
            raw=answer,
        )
        self.index = max(self.index, result.index)
        self.done = self.done or result.done
        self.reason = result.reason if result.done else self.reason
        return result

    def verify(self) -> VerifyResult:
        """Runs the task's tests on the tree as the session left it and answers the reward (the
        same answer every time; the session takes no steps after it)."""
        _, answer = self._t.request("POST", self._path("/verify"), None, idempotent=True)
        self.done = True
        return VerifyResult(
            reward=float(answer["reward"]),
            components={k: float(v) for k, v in (answer.get("components") or {}).items()},
            log=answer.get("log", ""),
            raw=answer,
        )

    def state(self) -> Dict[str, Any]:
        return self._t.request("GET", self._path())[1]

    def diff(self) -> Dict[str, Any]:
        """The tree's changes against the task's environment, as a unified diff."""
        return self._t.request("GET", self._path("/diff"))[1]

    def close(self) -> None:
        """Ends the session and destroys its sandbox. Closing one that already ended is not an error."""
        if self.closed:
            return
        try:
            self._t.request("DELETE", self._path())
        except SextantError as error:
            if error.code != "not_found":
                raise
        self.closed = True

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.id!r}, index={self.index}, done={self.done})"


def _tool_call(call: Any, step: int, position: int) -> Dict[str, Any]:
    if hasattr(call, "model_dump"):
        call = call.model_dump()
    if not isinstance(call, Mapping):
        raise TypeError(f"a tool call is a mapping, not {type(call).__name__}")
    function = call.get("function")
    if function is None and "name" in call:
        # The short form {"name", "arguments"}: its id is made from the step and position, so that
        # sending the step again sends the same ids.
        function = {"name": call["name"], "arguments": call.get("arguments", {})}
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise TypeError("a tool call needs function.name")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {
        "id": str(call.get("id") or f"call_{step}_{position}"),
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }
