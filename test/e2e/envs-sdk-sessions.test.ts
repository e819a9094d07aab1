/**
 * `sextant.envs.sessions` end to end, through `npm start`'s edge and a sandbox host of the test's
 * own, with a proxy in between that can drop the edge's answer to a step after the edge has run it:
 * the SDK counts its steps, sends a step whose answer was lost again with the same index (and the
 * edge runs it once), verifies, closes, and answers the edge's refusals as typed errors.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError, NotFoundError, Sextant } from "../../client/sdk/index.js";
import {
  makeOrg,
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { envClient, INSTRUCTION, pushTaskSet } from "../support/env-session.js";

/** A proxy to the edge that, while `drop` is above 0, lets a step run and then cuts the connection instead of answering. */
interface DroppingProxy {
  url: string;
  drop: number;
  /** The index of every step request that went through, dropped or not. */
  steps: number[];
  close(): Promise<void>;
}

async function droppingProxy(upstream: string): Promise<DroppingProxy> {
  const proxy: Omit<DroppingProxy, "url" | "close"> = { drop: 0, steps: [] };
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers))
      if (typeof value === "string" && !["host", "connection", "content-length"].includes(name))
        headers.set(name, value);
    const step = req.method === "POST" && /\/step$/.test(req.url ?? "");
    if (step) proxy.steps.push((JSON.parse(body.toString("utf8")) as { index: number }).index);
    const answer = await fetch(new URL(req.url!, upstream), {
      method: req.method!,
      headers,
      ...(body.byteLength > 0 ? { body } : {}),
    });
    const bytes = Buffer.from(await answer.arrayBuffer());
    if (step && proxy.drop > 0) {
      proxy.drop--;
      // The edge has run the step and answered; the client never hears it.
      req.socket.destroy();
      return;
    }
    const out: Record<string, string> = {};
    answer.headers.forEach((value, name) => {
      if (!["content-encoding", "content-length", "transfer-encoding", "connection"].includes(name)) out[name] = value;
    });
    res.writeHead(answer.status, out).end(bytes);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(proxy, {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

let host: SandboxHostHandle;
let stack: AgentStack;
let proxy: DroppingProxy;
let sextant: Sextant;
let set: { id: string; sha256: string };

beforeAll(async () => {
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host });
  const client = envClient(stack);
  set = await pushTaskSet(stack, client);
  proxy = await droppingProxy(stack.edge.baseURL);
  sextant = new Sextant({ apiKey: client.key, baseURL: proxy.url, maxRetries: 2, timeout: 60_000 });
}, 120_000);
afterAll(async () => {
  await proxy?.close();
  await stack?.edge.stop();
  await host?.stop();
});

/** One command appending `n` to steps.log: the task scores 1 when the log holds each step once, in order. */
const append = (n: number) => [
  { function: { name: "run_terminal", arguments: { command: `echo ${n} >> steps.log` } } },
];

describe("sextant.envs.sessions", () => {
  it("steps a session, sends a step whose answer was lost again once, verifies, and closes", async () => {
    const session = await sextant.envs.sessions.create({ taskset: set.id, task: 0, limits: { turns: 10 } });
    expect(session.index).toBe(0);
    expect(session.done).toBe(false);
    expect(session.tools.map((t) => (t as { function: { name: string } }).function.name)).toContain("run_terminal");
    expect(session.observation.messages[1]).toEqual({ role: "user", content: `${INSTRUCTION}\n` });
    expect(session.limits.turns).toBe(10);

    const first = await session.step(append(1), { content: "Logging the first step." });
    expect(first).toMatchObject({ index: 1, done: false });
    expect(first.results).toEqual([{ role: "tool", tool_call_id: "call_1_0", content: expect.any(String) }]);
    expect(session.index).toBe(1);

    proxy.drop = 1;
    const second = await session.step(append(2));
    expect(proxy.drop).toBe(0);
    // Sent twice with the same index: the edge ran it once and answered the second from its record.
    expect(proxy.steps).toEqual([1, 2, 2]);
    expect(second).toMatchObject({ index: 2, done: false });
    expect(second.results.map((r) => r.tool_call_id)).toEqual(["call_2_0"]);
    expect(session.index).toBe(2);

    // A step named by an index already run answers its record.
    expect((await session.step([], { index: 1 })).results).toEqual(first.results);
    expect(session.index).toBe(2);

    const state = await session.state();
    expect(state).toMatchObject({ id: session.id, steps: 2, done: false, reward: null });
    expect(state.usage.toolCalls).toBe(2);
    const { diff } = await session.diff();
    expect(diff).toContain("steps.log");

    const verdict = await session.verify();
    // steps.log reads 1, 2: a step run twice would have left "2" in it twice, and scored 0.
    expect(verdict.reward).toBe(1);
    expect(verdict.log).toContain("2");
    expect(session.done).toBe(true);
    expect(await session.verify()).toEqual(verdict);
    await expect(session.step(append(3))).rejects.toBeInstanceOf(ConflictError);

    await session.close();
    expect(await sextant.envs.sessions.get(session.id)).toMatchObject({ done: true, reward: 1 });
  }, 180_000);

  it("answers another org's session and task set as NotFoundError", async () => {
    const session = await sextant.envs.sessions.create({ taskset: set.id, task: set.sha256 });
    const other = await makeOrg(stack.edge, "sessions-intruder");
    const intruder = new Sextant({ apiKey: other.key, baseURL: stack.edge.baseURL, maxRetries: 0 });
    await expect(intruder.envs.sessions.get(session.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(intruder.envs.sessions.create({ taskset: set.id, task: 0 })).rejects.toBeInstanceOf(NotFoundError);
    expect(await session.state()).toMatchObject({ steps: 0, done: false });
    await session.close();
  }, 120_000);
});
