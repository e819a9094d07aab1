"""The client against a stand-in edge (standin_edge.py): the request shapes, the step index and its
replay, problem documents as errors, retries after Retry-After, and rollout streams."""

from __future__ import annotations

import os
import sys
import unittest
from pathlib import Path
from unittest import mock

# The package from the checkout when it is not installed, and the stand-in beside this file, however
# unittest was started (`discover -s clients/python/tests`, or `python3 -m unittest` in clients/python).
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from standin_edge import StandinEdge  # noqa: E402

from sextant_envs import Client, SextantConnectionError, SextantError, load_taskset_map  # noqa: E402
from sextant_envs._http import retry_after_seconds  # noqa: E402
from sextant_envs._sse import read_events  # noqa: E402


def client_of(edge: StandinEdge, **options) -> Client:
    client = Client(edge.url, edge.key, timeout=10, **options)
    # Waits are recorded, not slept, so the tests neither take long nor depend on the clock.
    client.waits = []
    client._transport.sleep = client.waits.append
    return client


def call(tool: str, **arguments) -> dict:
    return {"name": tool, "arguments": arguments}


class SessionTest(unittest.TestCase):
    def setUp(self) -> None:
        self.edge = StandinEdge().__enter__()
        self.addCleanup(self.edge.__exit__)
        self.client = client_of(self.edge)

    def test_create_offers_tools_and_observation(self) -> None:
        session = self.client.sessions.create("ts_1", 0, seed=7, limits={"idleSeconds": 30})
        self.assertEqual(self.edge.requests[-1]["body"],
                         {"taskset": "ts_1", "task": 0, "seed": 7, "limits": {"idleSeconds": 30}})
        self.assertEqual(session.id, "env_1")
        self.assertEqual(session.tools[0]["function"]["name"], "run_terminal")
        self.assertEqual([m["role"] for m in session.messages], ["system", "user"])
        self.assertEqual(session.limits, {"idleSeconds": 30})

    def test_steps_number_themselves_and_send_openai_tool_calls(self) -> None:
        session = self.client.sessions.create("ts_1", 0)
        first = session.step([{"id": "c1", "type": "function",
                               "function": {"name": "run_terminal", "arguments": '{"command": "ls"}'}}])
        second = session.step([call("run_terminal", command="npm test")], content="Running the tests.")
        self.assertEqual([first.index, second.index], [1, 2])
        body = self.edge.requests[-1]["body"]
        self.assertEqual(body["index"], 2)
        self.assertEqual(body["content"], "Running the tests.")
        self.assertEqual(body["tool_calls"], [{"id": "call_2_0", "type": "function",
                                               "function": {"name": "run_terminal",
                                                            "arguments": '{"command": "npm test"}'}}])
        self.assertEqual(second.results[0]["tool_call_id"], "call_2_0")
        self.assertFalse(second.done)

    def test_a_lost_step_answer_is_asked_again_with_the_same_index_and_runs_once(self) -> None:
        session = self.client.sessions.create("ts_1", 0)
        self.edge.lose_answer["/step"] = 1
        result = session.step([call("run_terminal", command="echo once")])
        steps = [r for r in self.edge.requests if r["route"].endswith("/step")]
        self.assertEqual([s["body"]["index"] for s in steps], [1, 1])
        self.assertEqual(steps[0]["request_id"], steps[1]["request_id"])
        self.assertEqual(self.edge.ran, ["call_1_0"])
        self.assertEqual(result.results[0]["content"], "ran {'command': 'echo once'}")
        self.assertEqual(session.index, 1)

    def test_a_step_already_run_answers_its_recorded_results(self) -> None:
        session = self.client.sessions.create("ts_1", 0)
        first = session.step([call("run_terminal", command="date")])
        again = session.step([call("run_terminal", command="something else")], index=1)
        self.assertEqual(again.results, first.results)
        self.assertEqual(self.edge.ran, ["call_1_0"])
        self.assertEqual(session.index, 1)

    def test_a_step_past_the_next_is_a_conflict(self) -> None:
        session = self.client.sessions.create("ts_1", 0)
        with self.assertRaises(SextantError) as caught:
            session.step([call("run_terminal", command="ls")], index=3)
        self.assertEqual((caught.exception.code, caught.exception.status), ("conflict", 409))
        self.assertIn("next step is 1", caught.exception.detail)
        self.assertTrue(caught.exception.request_id.startswith("py-"))

    def test_finish_ends_the_episode_and_verify_answers_the_reward(self) -> None:
        with self.client.sessions.create("ts_1", 0) as session:
            result = session.step([call("finish", summary="done")])
            self.assertTrue(result.done)
            self.assertEqual(result.reason, "finished")
            verdict = session.verify()
            self.assertEqual((verdict.reward, verdict.components, verdict.log), (1.0, {"tests": 1.0}, "1 passed"))
            self.assertEqual(session.verify().reward, 1.0)
            with self.assertRaises(SextantError) as caught:
                session.step([call("run_terminal", command="ls")])
            self.assertEqual(caught.exception.code, "conflict")
        self.assertEqual(self.edge.requests[-1]["route"], "DELETE /v1/envs/sessions/env_1")
        self.assertFalse(self.edge.sessions["env_1"]["open"])
        session.close()  # already closed: nothing sent
        self.assertEqual(self.edge.requests[-1]["route"], "DELETE /v1/envs/sessions/env_1")

    def test_closing_a_session_that_ended_by_itself_is_not_an_error(self) -> None:
        session = self.client.sessions.create("ts_1", 0)
        self.edge.sessions["env_1"]["open"] = False
        session.close()
        self.assertTrue(session.closed)

    def test_one_client_serves_sessions_on_several_threads(self) -> None:
        import threading

        answers, failures = {}, []

        def episode(n: int) -> None:
            try:
                with self.client.sessions.create("ts_1", 0, seed=n) as session:
                    steps = [session.step([call("run_terminal", command=f"echo {n}.{i}")]) for i in range(3)]
                    answers[session.id] = [(s.index, s.results[0]["content"]) for s in steps]
            except Exception as error:  # noqa: BLE001 - reported below
                failures.append(error)

        threads = [threading.Thread(target=episode, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        self.assertEqual(failures, [])
        self.assertEqual(len(answers), 8)
        for steps in answers.values():
            self.assertEqual([index for index, _ in steps], [1, 2, 3])
            n = steps[0][1].split("'echo ")[1].split(".")[0]
            self.assertEqual([content for _, content in steps], [f"ran {{'command': 'echo {n}.{i}'}}" for i in range(3)])
        self.assertEqual(sorted(self.edge.sessions), [f"env_{n}" for n in range(1, 9)])

    def test_objects_with_model_dump_are_taken_as_tool_calls(self) -> None:
        class OpenAIToolCall:
            def model_dump(self) -> dict:
                return {"id": "tc_9", "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}

        session = self.client.sessions.create("ts_1", 0)
        session.step([OpenAIToolCall()])
        self.assertEqual(self.edge.requests[-1]["body"]["tool_calls"][0]["id"], "tc_9")
        with self.assertRaises(TypeError):
            session.step(["run_terminal ls"])


class ErrorTest(unittest.TestCase):
    def setUp(self) -> None:
        self.edge = StandinEdge().__enter__()
        self.addCleanup(self.edge.__exit__)

    def test_a_problem_document_becomes_a_sextant_error(self) -> None:
        client = client_of(self.edge)
        with self.assertRaises(SextantError) as caught:
            client.tasksets.get("ts_missing")
        error = caught.exception
        self.assertEqual((error.code, error.status, error.detail), ("not_found", 404, "No such task set."))
        self.assertEqual(error.request_id, self.edge.requests[-1]["request_id"])
        self.assertEqual(error.problem["type"], "/errors/not_found")
        self.assertEqual(client.tasksets.get("ts_1")["tasks"][0]["index"], 0)

    def test_a_wrong_key_is_unauthenticated(self) -> None:
        client = Client(self.edge.url, "sk-wrong", timeout=10)
        with self.assertRaises(SextantError) as caught:
            client.sessions.create("ts_1", 0)
        self.assertEqual((caught.exception.code, caught.exception.status), ("unauthenticated", 401))

    def test_429_and_503_are_retried_after_retry_after(self) -> None:
        client = client_of(self.edge)
        self.edge.refuse["POST /v1/envs/sessions"] = [
            {"status": 429, "code": "rate_limited", "headers": {"Retry-After": "3"}},
            {"status": 503, "code": "unavailable", "headers": {"Retry-After": "1"}},
        ]
        session = client.sessions.create("ts_1", 0)
        self.assertEqual(session.id, "env_1")
        self.assertEqual(client.waits, [3.0, 1.0])
        creates = [r for r in self.edge.requests if r["route"] == "POST /v1/envs/sessions"]
        self.assertEqual(len(creates), 3)

    def test_a_retry_after_past_the_cap_is_the_callers_to_schedule(self) -> None:
        client = client_of(self.edge, max_retry_wait=30)
        self.edge.refuse["POST /v1/envs/sessions"] = [
            {"status": 429, "code": "rate_limited", "headers": {"Retry-After": "3600"}},
        ]
        with self.assertRaises(SextantError) as caught:
            client.sessions.create("ts_1", 0)
        self.assertEqual((caught.exception.code, caught.exception.retry_after), ("rate_limited", 3600.0))
        self.assertEqual(client.waits, [])

    def test_retries_stop_after_max_retries(self) -> None:
        client = client_of(self.edge, max_retries=2)
        self.edge.refuse["/step"] = [{"status": 503, "code": "unavailable"}] * 5
        session = client.sessions.create("ts_1", 0)
        with self.assertRaises(SextantError) as caught:
            session.step([call("run_terminal", command="ls")])
        self.assertEqual(caught.exception.code, "unavailable")
        self.assertEqual(len(client.waits), 2)
        self.assertEqual(session.index, 0)

    def test_a_lost_create_is_not_sent_twice(self) -> None:
        client = client_of(self.edge)
        self.edge.lose_answer["POST /v1/envs/sessions"] = 1
        with self.assertRaises(SextantConnectionError):
            client.sessions.create("ts_1", 0)
        self.assertEqual(len(self.edge.sessions), 1)

    def test_an_unreachable_edge_is_a_connection_error(self) -> None:
        client = Client("http://127.0.0.1:9", "sk-test", timeout=5, max_retries=0)
        with self.assertRaises(SextantConnectionError) as caught:
            client.tasksets.get("ts_1")
        self.assertEqual((caught.exception.code, caught.exception.status), ("connection_error", None))

    def test_url_and_key_come_from_the_environment(self) -> None:
        with mock.patch.dict(os.environ, {"SEXTANT_URL": self.edge.url, "SEXTANT_API_KEY": self.edge.key}):
            self.assertEqual(Client().tasksets.get("ts_1")["id"], "ts_1")
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaisesRegex(ValueError, "SEXTANT_URL"):
                Client()
            with self.assertRaisesRegex(ValueError, "SEXTANT_API_KEY"):
                Client("http://127.0.0.1:1")

    def test_retry_after_takes_seconds_and_http_dates(self) -> None:
        self.assertEqual(retry_after_seconds("7"), 7.0)
        self.assertEqual(retry_after_seconds("Thu, 01 Jan 1970 00:01:40 GMT", now=40.0), 60.0)
        self.assertIsNone(retry_after_seconds("soon"))
        self.assertIsNone(retry_after_seconds(None))


class RolloutTest(unittest.TestCase):
    EVENTS = [
        {"type": "rollout.started", "data": {"rollout": "r0", "task": 0}},
        {"type": "rollout.started", "data": {"rollout": "r1", "task": 0}},
        {"type": "rollout.ended", "data": {"rollout": "r0", "reward": 1.0}},
        {"type": "rollout.ended", "data": {"rollout": "r1", "reward": 0.0}},
        {"type": "group.ended", "data": {"task": 0, "advantages": [1.0, -1.0]}},
        {"type": "summary", "data": {"rollouts": 2, "meanReward": 0.5}},
    ]

    def setUp(self) -> None:
        self.edge = StandinEdge().__enter__()
        self.addCleanup(self.edge.__exit__)
        self.edge.rollout_events = self.EVENTS
        self.client = client_of(self.edge)

    def test_a_run_yields_its_events_and_returns_the_summary(self) -> None:
        run = self.client.rollouts.run("ts_1", {"model": "policy"}, group_size=2,
                                       sampling={"temperature": 1.0}, tasks=[0], concurrency=4)
        self.assertEqual(self.edge.requests, [])  # sent when first read
        types = [event.type for event in run]
        self.assertEqual(types, [e["type"] for e in self.EVENTS])
        self.assertEqual(run.summary, {"rollouts": 2, "meanReward": 0.5})
        self.assertEqual(run.events[2].data["reward"], 1.0)
        self.assertEqual(run.events[0].at, "2026-01-01T00:00:00.000Z")
        self.assertEqual(run.result(), run.summary)
        self.assertEqual(run.id, "run_1")
        self.assertEqual(self.edge.requests[0]["body"],
                         {"taskset": "ts_1", "policy": {"model": "policy"}, "group_size": 2,
                          "sampling": {"temperature": 1.0}, "tasks": [0], "concurrency": 4})

    def test_a_broken_stream_resumes_from_its_last_event(self) -> None:
        self.edge.break_stream_after = 3
        run = self.client.rollouts.run("ts_1", {"model": "policy"}, group_size=2)
        self.assertEqual(run.result()["rollouts"], 2)
        self.assertEqual([e.id for e in run.events], ["1", "2", "3", "4", "5", "6"])
        resumed = self.edge.requests[1]
        self.assertEqual((resumed["route"], resumed["last_event_id"]), ("GET /v1/envs/rollouts/run_1/events", "3"))

    def test_a_runs_events_are_read_again_from_after_an_event(self) -> None:
        again = self.client.rollouts.events("run_1", after="4")
        self.assertEqual([(e.id, e.type) for e in again], [("5", "group.ended"), ("6", "summary")])
        self.assertEqual(again.summary["meanReward"], 0.5)
        read = self.edge.requests[0]
        self.assertEqual((read["route"], read["last_event_id"]), ("GET /v1/envs/rollouts/run_1/events", "4"))

    def test_an_error_event_raises_its_code(self) -> None:
        self.edge.rollout_events = self.EVENTS[:1] + [{"type": "error", "data": {"code": "invalid_request",
                                                                                 "detail": "No such task 9."}}]
        run = self.client.rollouts.run("ts_1", {"model": "policy"}, group_size=2)
        with self.assertRaises(SextantError) as caught:
            run.result()
        self.assertEqual((caught.exception.code, caught.exception.status), ("invalid_request", 400))


class TaskSetMapTest(unittest.TestCase):
    def test_the_push_map_names_each_tasks_index(self) -> None:
        import json
        import tempfile

        with tempfile.TemporaryDirectory() as root:
            with open(os.path.join(root, ".sextant-taskset.json"), "w") as file:
                json.dump({"id": "tset_1", "baseUrl": "http://127.0.0.1:8787", "pushedAt": "2026-01-01T00:00:00.000Z",
                           "tasks": {"a/greeting": {"index": 0, "sha256": "ab" * 32, "bytes": 120},
                                     "b/plain": {"index": 1, "sha256": "cd" * 32, "bytes": 99}}}, file)
            pushed = load_taskset_map(root)
            self.assertEqual(load_taskset_map(os.path.join(root, ".sextant-taskset.json")), pushed)
        self.assertEqual((pushed.id, pushed.index("b/plain"), pushed.tasks["a/greeting"].bytes), ("tset_1", 1, 120))
        with self.assertRaisesRegex(KeyError, "no task named 'c'.*a/greeting, b/plain"):
            pushed.index("c")


class ServerSentEventsTest(unittest.TestCase):
    def test_multi_line_data_comments_and_ids(self) -> None:
        import io

        stream = io.BytesIO(b": hi\n\nid: 4\nevent: x\ndata: a\ndata:b\n\ndata: {\"k\": 1}\r\n\r\n")
        events = list(read_events(stream))
        self.assertEqual([(e.event, e.data, e.id) for e in events], [("x", "a\nb", "4"), ("message", '{"k": 1}', "4")])
        self.assertEqual(events[1].json(), {"k": 1})


if __name__ == "__main__":
    unittest.main()
