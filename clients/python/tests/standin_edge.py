"""A stand-in for the Sextant edge's environment routes, for the client's offline tests: an
http.server that speaks the routes' request and answer shapes (problem+json errors, server-sent
events) over an in-memory session, and can be told to lose an answer or refuse with a 429. The
live tests (test_live.py) run the same client against a real local edge."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional


class StandinEdge:
    def __init__(self, key: str = "sk-test") -> None:
        self.key = key
        self.lock = threading.Lock()
        self.sessions: Dict[str, Dict[str, Any]] = {}
        # Every tool call the stand-in ran, in order: a replayed step must not add to it.
        self.ran: List[str] = []
        self.requests: List[Dict[str, Any]] = []
        # Faults to apply to the next requests whose "METHOD path" ends with the key.
        self.lose_answer: Dict[str, int] = {}
        self.refuse: Dict[str, List[Dict[str, Any]]] = {}
        self.break_stream_after: Optional[int] = None
        self.rollout_events: List[Dict[str, Any]] = []
        edge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                edge.handle(self, "GET")

            def do_POST(self) -> None:
                edge.handle(self, "POST")

            def do_DELETE(self) -> None:
                edge.handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "StandinEdge":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -------------------------------------------------------------------------------- plumbing

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        route = f"{method} {h.path}"
        with self.lock:
            self.requests.append(
                {"route": route, "body": body, "request_id": h.headers.get("X-Request-Id"),
                 "last_event_id": h.headers.get("Last-Event-ID")}
            )
            refusal = next((k for k in self.refuse if route.endswith(k) and self.refuse[k]), None)
            planned = self.refuse[refusal].pop(0) if refusal else None
        if h.headers.get("Authorization") != f"Bearer {self.key}":
            return self.problem(h, 401, "unauthenticated", "No API key, or an unknown one.")
        if planned:
            return self.problem(h, planned["status"], planned["code"], "Try again later.", planned.get("headers"))
        parts = h.path.strip("/").split("/")
        if parts[:3] != ["v1", "envs", "sessions"] and parts[:3] != ["v1", "envs", "rollouts"]:
            if parts[:3] == ["v1", "envs", "tasksets"] and len(parts) == 4 and method == "GET":
                if parts[3] != "ts_1":
                    return self.problem(h, 404, "not_found", "No such task set.")
                return self.json(h, 200, {"id": "ts_1", "tasks": [{"index": 0, "sha256": "ab" * 32}]})
            return self.problem(h, 404, "not_found", "No such route.")
        if parts[2] == "rollouts":
            return self.rollouts(h, method, parts, body)
        status, answer = self.sessions_route(method, parts, body)
        with self.lock:
            lost = next((k for k in self.lose_answer if route.endswith(k) and self.lose_answer[k] > 0), None)
            if lost:
                self.lose_answer[lost] -= 1
        if lost:
            # The request ran; its answer never arrives.
            h.close_connection = True
            return
        if status >= 400:
            return self.problem(h, status, answer["code"], answer["detail"])
        self.json(h, status, answer)

    def json(self, h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        raw = b"" if body is None else json.dumps(body).encode()
        h.send_response(status)
        if body is not None:
            h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.send_header("X-Request-Id", h.headers.get("X-Request-Id") or "edge-minted")
        h.end_headers()
        h.wfile.write(raw)

    def problem(self, h: BaseHTTPRequestHandler, status: int, code: str, detail: str,
                headers: Optional[Dict[str, str]] = None) -> None:
        raw = json.dumps({"type": f"/errors/{code}", "title": code, "status": status, "code": code,
                          "detail": detail, "instance": h.headers.get("X-Request-Id")}).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/problem+json")
        h.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(raw)

    # -------------------------------------------------------------------------------- sessions

    def sessions_route(self, method: str, parts: List[str], body: Any) -> Any:
        with self.lock:
            if method == "POST" and len(parts) == 3:
                if body.get("taskset") != "ts_1":
                    return 404, {"code": "not_found", "detail": "No such task set."}
                sid = f"env_{len(self.sessions) + 1}"
                self.sessions[sid] = {"steps": {}, "verified": None, "open": True, "seed": body.get("seed")}
                return 201, {
                    "id": sid, "status": "ready",
                    "tools": [{"type": "function", "function": {"name": "run_terminal", "parameters": {}}}],
                    "observation": {"messages": [{"role": "system", "content": "You are…"},
                                                 {"role": "user", "content": "Make the test pass."}]},
                    "limits": body.get("limits") or {"idleSeconds": 600},
                }
            session = self.sessions.get(parts[3])
            if session is None or not session["open"]:
                return 404, {"code": "not_found", "detail": "No such session."}
            tail = parts[4] if len(parts) > 4 else None
            if method == "DELETE" and tail is None:
                session["open"] = False
                return 204, None
            if method == "GET" and tail is None:
                return 200, {"id": parts[3], "steps": len(session["steps"])}
            if method == "POST" and tail == "step":
                if session["verified"] is not None:
                    return 409, {"code": "conflict", "detail": "The session was verified."}
                index = body["index"]
                if index in session["steps"]:
                    return 200, session["steps"][index]
                if index != len(session["steps"]) + 1:
                    return 409, {"code": "conflict", "detail": f"The next step is {len(session['steps']) + 1}."}
                results = []
                done = False
                for call in body["tool_calls"]:
                    self.ran.append(call["id"])
                    args = json.loads(call["function"]["arguments"])
                    done = done or call["function"]["name"] == "finish"
                    results.append({"role": "tool", "tool_call_id": call["id"], "content": f"ran {args}"})
                answer = {"index": index, "results": results, "done": done,
                          "reason": "finished" if done else None, "usage": {"turns": index}}
                session["steps"][index] = answer
                return 200, answer
            if method == "POST" and tail == "verify":
                if session["verified"] is None:
                    session["verified"] = {"reward": 1.0 if session["steps"] else 0.0,
                                           "components": {"tests": 1.0}, "log": "1 passed"}
                return 200, session["verified"]
            return 404, {"code": "not_found", "detail": "No such route."}

    # -------------------------------------------------------------------------------- rollouts

    def rollouts(self, h: BaseHTTPRequestHandler, method: str, parts: List[str], body: Any) -> None:
        if method == "POST" and len(parts) == 3:
            start = 0
        elif method == "GET" and len(parts) == 5 and parts[4] == "events" and parts[3] == "run_1":
            start = int(h.headers.get("Last-Event-ID") or 0)
        else:
            return self.problem(h, 404, "not_found", "No such rollout run.")
        h.send_response(200)
        if method == "POST":
            h.send_header("Location", "/v1/envs/rollouts/run_1")
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-store")
        h.end_headers()
        h.close_connection = True
        h.wfile.write(b": keep-alive\n\n")
        for n, event in enumerate(self.rollout_events[start:], start + 1):
            if self.break_stream_after is not None and n > self.break_stream_after:
                self.break_stream_after = None
                return
            data = json.dumps({"id": n, "type": event["type"], "at": "2026-01-01T00:00:00.000Z", "data": event["data"]})
            if event["type"] == "error":
                data = json.dumps(event["data"])
            h.wfile.write(f"id: {n}\nevent: {event['type']}\ndata: {data}\n\n".encode())
            h.wfile.flush()
