"""The transport: JSON over urllib.request, server-sent events over http.client, problem documents
as `SextantError`, and retries that honour `Retry-After` up to a cap."""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from ._errors import SextantConnectionError, SextantError, code_for_status
from ._sse import ServerSentEvent, read_events

VERSION = "0.1.0"
USER_AGENT = f"sextant-envs-python/{VERSION}"

# Statuses that say nothing happened: any request may be sent again.
RETRY_ANY = frozenset({429, 503})
# Statuses after which the request may have had an effect: sent again only when it is idempotent.
RETRY_IDEMPOTENT = frozenset({500, 502, 504})


def _default_sleep(seconds: float) -> None:
    time.sleep(seconds)


class Transport:
    """Holds no connection and no mutable state between requests, so one client may be used from
    several threads (a Ray actor's, say); each request opens its own connection."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout: float,
        max_retries: int,
        max_retry_wait: float,
        sleep: Callable[[float], None] = _default_sleep,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.sleep = sleep

    def headers(self, request_id: str, accept: str = "application/json") -> Dict[str, str]:
        return {
            "Authorization": f"Bearer {self.api_key}",
            "Accept": accept,
            "User-Agent": USER_AGENT,
            "X-Request-Id": request_id,
        }

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        idempotent: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> Tuple[int, Any]:
        """Sends one request (again, as the status and `idempotent` allow); its status and JSON body
        (None for an empty one). `idempotent` defaults to the method's own meaning."""
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE")
        # One id for every attempt, so the edge's records tie the retries together.
        request_id = f"py-{uuid.uuid4()}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            headers = self.headers(request_id)
            if data is not None:
                headers["Content-Type"] = "application/json"
            req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=timeout or self.timeout) as response:
                    raw = response.read()
                    return response.status, _json(raw)
            except urllib.error.HTTPError as failure:
                error = error_of(failure.code, failure.headers, _read(failure), request_id)
                if last or not retryable(failure.code, idempotent):
                    raise error from None
                self._wait_before_retry(error, attempt)
            except (OSError, http.client.HTTPException) as failure:
                # No answer: the request may or may not have run, so it goes again only if running it
                # twice is harmless.
                error = SextantConnectionError(f"{method} {path}: {failure}", request_id)
                if last or not idempotent:
                    raise error from failure
                self.sleep(backoff(attempt))
        raise AssertionError("unreachable")

    def stream(
        self,
        method: str,
        path: str,
        body: Any = None,
        last_event_id: Optional[str] = None,
        idle_timeout: float = 300.0,
        on_open: Optional[Callable[[Mapping[str, str]], None]] = None,
    ) -> Iterator[ServerSentEvent]:
        """Opens an event stream (retrying a 429 or 503 before it starts) and yields its events;
        `on_open` gets the answer's headers first. A broken connection raises
        `SextantConnectionError`; the caller decides whether to resume."""
        request_id = f"py-{uuid.uuid4()}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        for attempt in range(self.max_retries + 1):
            headers = self.headers(request_id, accept="text/event-stream")
            if data is not None:
                headers["Content-Type"] = "application/json"
            if last_event_id is not None:
                headers["Last-Event-ID"] = last_event_id
            conn = _connection(self.base_url, idle_timeout)
            try:
                try:
                    conn.request(method, urllib.parse.urlsplit(self.base_url).path + path, body=data, headers=headers)
                    response = conn.getresponse()
                except (OSError, http.client.HTTPException) as failure:
                    raise SextantConnectionError(f"{method} {path}: {failure}", request_id) from failure
                if response.status != 200:
                    error = error_of(response.status, response.headers, response.read(), request_id)
                    if attempt == self.max_retries or response.status not in RETRY_ANY:
                        raise error
                    self._wait_before_retry(error, attempt)
                    continue
                content_type = response.headers.get("Content-Type", "")
                if not content_type.startswith("text/event-stream"):
                    raise SextantError(
                        "invalid_response",
                        response.status,
                        f"{method} {path} answered {content_type or 'no content type'}, not an event stream",
                        response.headers.get("X-Request-Id") or request_id,
                    )
                if on_open is not None:
                    on_open(response.headers)
                try:
                    yield from read_events(response)
                except (OSError, http.client.HTTPException) as failure:
                    raise SextantConnectionError(f"{method} {path}: the stream broke: {failure}", request_id) from failure
                return
            finally:
                conn.close()

    def _wait_before_retry(self, error: SextantError, attempt: int) -> None:
        if error.retry_after is None:
            self.sleep(backoff(attempt))
        elif error.retry_after <= self.max_retry_wait:
            self.sleep(error.retry_after)
        else:
            # Longer than the caller agreed to wait (a quota's reset, say): theirs to schedule.
            raise error


def retryable(status: int, idempotent: bool) -> bool:
    return status in RETRY_ANY or (idempotent and status in RETRY_IDEMPOTENT)


def backoff(attempt: int) -> float:
    """0.5 s, 1 s, 2 s … capped at 8 s, less up to a quarter, so that retrying clients spread out."""
    return min(0.5 * 2**attempt, 8.0) * (1 - random.random() * 0.25)


def retry_after_seconds(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """`Retry-After` as seconds from now: a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if seconds == seconds and seconds != float("inf") else None


def error_of(status: int, headers: Mapping[str, str], raw: bytes, request_id: str) -> SextantError:
    """The error a non-2xx answer stands for, from its problem document where it has one."""
    problem: Optional[Dict[str, Any]] = None
    body = _json_or_none(raw)
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        problem = body
    text = raw.decode("utf-8", "replace")[:200] if raw else ""
    detail = (problem or {}).get("detail") or ("" if problem else text)
    return SextantError(
        code=(problem or {}).get("code") or code_for_status(status),
        status=status,
        detail=str(detail),
        request_id=(problem or {}).get("instance") or headers.get("X-Request-Id") or request_id,
        title=(problem or {}).get("title"),
        problem=problem,
        retry_after=retry_after_seconds(headers.get("Retry-After")),
    )


def _connection(base_url: str, timeout: float) -> http.client.HTTPConnection:
    parsed = urllib.parse.urlsplit(base_url)
    if parsed.scheme == "https":
        return http.client.HTTPSConnection(parsed.netloc, timeout=timeout)
    return http.client.HTTPConnection(parsed.netloc, timeout=timeout)


def _read(failure: urllib.error.HTTPError) -> bytes:
    try:
        return failure.read()
    except (OSError, http.client.HTTPException):
        return b""


def _json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise SextantError("invalid_response", None, f"the edge answered with a body that is not JSON: {raw[:200]!r}")


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None
