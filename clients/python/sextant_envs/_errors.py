"""The errors the client raises: the edge's problem documents, and failures to reach it."""

from __future__ import annotations

from typing import Any, Dict, Optional

# Each code's HTTP status, as protocol/errors.ts gives it: a stream's `error` event carries only the
# code, and the status says whether it is worth retrying.
STATUS_BY_CODE: Dict[str, int] = {
    "invalid_request": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "request_timeout": 408,
    "conflict": 409,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "rate_limited": 429,
    "internal": 500,
    "upstream_failure": 502,
    "unavailable": 503,
    "upstream_timeout": 504,
}

_CODE_BY_STATUS = {status: code for code, status in STATUS_BY_CODE.items()}


def code_for_status(status: int) -> str:
    """The code for a bare status, for an answer that did not carry a problem document."""
    return _CODE_BY_STATUS.get(status, "internal" if status >= 500 else "invalid_request")


class SextantError(Exception):
    """The edge answered with an error: `code` is one of protocol/errors.ts's codes.

    `problem` is the whole problem document (its extension members, such as `errors` or `limit`,
    included); `request_id` is what to quote when reporting a failure.
    """

    def __init__(
        self,
        code: str,
        status: Optional[int],
        detail: str = "",
        request_id: Optional[str] = None,
        title: Optional[str] = None,
        problem: Optional[Dict[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        self.code = code
        self.status = status
        self.detail = detail
        self.request_id = request_id
        self.title = title
        self.problem = problem or {}
        self.retry_after = retry_after
        where = f" (request {request_id})" if request_id else ""
        head = f"{status} {code}" if status is not None else code
        super().__init__(f"{head}: {detail or title or 'no detail'}{where}")


class SextantConnectionError(SextantError):
    """The edge could not be reached, or the connection broke before its answer arrived."""

    def __init__(self, detail: str, request_id: Optional[str] = None) -> None:
        super().__init__("connection_error", None, detail, request_id)
