/**
 * `sextant.evals.run()` against a local server speaking the edge's eval routes whose event stream
 * breaks the ways a real network does (cut mid-event, a 503, closed early): the run is made with one
 * POST, however often the stream breaks; its id is told before any event; every event comes out
 * once, in order, each reconnection sending the last event's id. A POST whose answer is lost is
 * never sent again. (The faults need a stand-in: the real edge cannot be made to drop a connection
 * mid-event on demand; the end-to-end run through the edge is test/e2e/eval-cli.test.ts.)
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import type { EvalRun } from "../../protocol/evals/api.js";
import type { RolloutEvent } from "../../protocol/envs/rollouts.js";
import { APIConnectionError, Sextant } from "../../client/sdk/index.js";

const ID = "eval_aaaaaaaaaaaaaaaaaaaa";
const AT = new Date(0).toISOString();
const SHA = "a".repeat(64);

const RUN: EvalRun = {
  id: ID,
  status: "running",
  taskset: "tset_one",
  agent: "model",
  model: "m",
  checkpoint: null,
  attempts: 3,
  concurrency: 8,
  price: null,
  rolloutRun: "run_aaaaaaaaaaaaaaaaaaaa",
  createdAt: AT,
  endedAt: null,
};

/** Three attempts of one task, started and ended, its group, then the summary. */
function runEvents(): RolloutEvent[] {
  const task = { index: 0, sha256: SHA };
  const started = (m: number) => ({ member: m, groupIndex: m, task, seed: m, rolloutId: `run_x-${m}` });
  const out: RolloutEvent[] = [];
  for (let m = 0; m < 3; m++) out.push({ id: 0, type: "rollout.started", at: AT, data: started(m) });
  for (let m = 0; m < 3; m++)
    out.push({
      id: 0,
      type: "rollout.ended",
      at: AT,
      data: {
        ...started(m),
        reward: m === 1 ? 0 : 1,
        components: {},
        outcome: "finished",
        turns: 2,
        tokens: 100 + m,
        toolCalls: 1,
        sandboxSeconds: 1,
        startedAt: AT,
        endedAt: AT,
        durationMs: 10,
      },
    });
  out.push({
    id: 0,
    type: "group.ended",
    at: AT,
    data: {
      task,
      group: 0,
      members: [0, 1, 2],
      rewards: [1, 0, 1],
      advantages: [0.7, -1.4, 0.7],
      mean: 2 / 3,
      std: 0.47,
    },
  });
  out.push({
    id: 0,
    type: "summary",
    at: AT,
    data: {
      rollouts: 3,
      ended: 3,
      verified: 3,
      meanReward: 2 / 3,
      solved: 2,
      groups: 1,
      outcomes: { finished: 3 },
      tokens: 303,
      turns: 6,
      durationMs: 30,
    },
  });
  return out.map((e, i) => ({ ...e, id: i + 1 }) as RolloutEvent);
}

const frame = (e: RolloutEvent) => `id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(
    servers.splice(0).map((s) => {
      const closed = new Promise((r) => s.close(r));
      s.closeAllConnections();
      return closed;
    }),
  );
});

interface Seen {
  url: string;
  posts: unknown[];
  /** `Last-Event-ID` of each events request, in order. */
  lastEventIds: (string | null)[];
  /** What the client had been told and yielded at each events request. */
  onEvents?: () => void;
}

type Fault = "cut" | "unavailable" | "close-after-2";

/** The eval routes: POST makes the run (or drops the connection when `dropPost`), events break by `faults` in turn. */
async function edge(events: RolloutEvent[], faults: Fault[], dropPost = false): Promise<Seen> {
  const seen: Seen = { url: "", posts: [], lastEventIds: [] };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method === "POST" && req.url === "/v1/evals/runs") {
      let body = "";
      req.on("data", (d: Buffer) => (body += d.toString()));
      req.on("end", () => {
        seen.posts.push(JSON.parse(body));
        if (dropPost) return void res.socket?.destroy();
        res.writeHead(201, { "Content-Type": "application/json", Location: `/v1/evals/runs/${ID}` });
        res.end(JSON.stringify(RUN));
      });
      return;
    }
    if (req.method === "GET" && req.url === `/v1/evals/runs/${ID}/events`) {
      seen.lastEventIds.push((req.headers["last-event-id"] as string | undefined) ?? null);
      seen.onEvents?.();
      const from = Number(req.headers["last-event-id"] ?? 0);
      const fault = faults[seen.lastEventIds.length - 1];
      if (fault === "unavailable") {
        res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "0" });
        return void res.end(
          JSON.stringify({ type: "/errors/unavailable", title: "x", status: 503, code: "unavailable" }),
        );
      }
      res.writeHead(200, { "Content-Type": "text/event-stream; charset=utf-8" });
      const rest = events.slice(from);
      if (fault === "close-after-2") return void res.end(rest.slice(0, 2).map(frame).join(""));
      if (fault === "cut") {
        // Two whole events and half of the third, then the connection drops.
        const text = rest.slice(0, 2).map(frame).join("") + frame(rest[2]!).slice(0, 40);
        return void res.write(text, () => setImmediate(() => res.socket?.destroy()));
      }
      return void res.end(rest.map(frame).join(""));
    }
    res.writeHead(404).end();
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  seen.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return seen;
}

const sdkFor = (url: string) => new Sextant({ apiKey: generateApiKey(), baseURL: url, maxRetries: 0, timeout: 5_000 });

describe("evals.run", () => {
  it("makes the run once, says its id first, and yields every event once across broken streams", async () => {
    const events = runEvents();
    const served = await edge(events, ["cut", "unavailable", "close-after-2"]);
    const yielded: RolloutEvent[] = [];
    const told: string[] = [];
    const expectedIds: string[] = [];
    served.onEvents = () => expectedIds.push(String(yielded.at(-1)?.id ?? 0));
    const request = { taskset: "tset_one", model: "m", attempts: 3 };
    for await (const event of sdkFor(served.url).evals.run(request, {
      onRun: (id, run) => {
        expect(yielded).toHaveLength(0);
        expect(run).toEqual(RUN);
        told.push(id);
      },
    }))
      yielded.push(event);
    expect(served.posts).toEqual([request]);
    expect(told).toEqual([ID]);
    expect(yielded).toEqual(events);
    // The cut after 2 events, the 503, the close after 2 more, then the rest: each from the last event yielded.
    expect(served.lastEventIds).toEqual(["0", "2", "2", "4"]);
    expect(served.lastEventIds).toEqual(expectedIds);
  });

  it("never sends the POST again when its answer is lost", async () => {
    const served = await edge(runEvents(), [], true);
    // Retries allowed: a request that may have had its effect is still not sent twice.
    const sdk = new Sextant({ apiKey: generateApiKey(), baseURL: served.url, maxRetries: 3, timeout: 5_000 });
    const iterate = async () => {
      for await (const _ of sdk.evals.run({ taskset: "tset_one", agent: "noop" }));
    };
    await expect(iterate()).rejects.toBeInstanceOf(APIConnectionError);
    expect(served.posts).toHaveLength(1);
    expect(served.lastEventIds).toEqual([]);
  });

  it("events(id, { after }) reattaches from there", async () => {
    const events = runEvents();
    const served = await edge(events, []);
    const yielded: RolloutEvent[] = [];
    for await (const e of sdkFor(served.url).evals.events(ID, { after: 5 })) yielded.push(e);
    expect(yielded).toEqual(events.slice(5));
    expect(served.lastEventIds).toEqual(["5"]);
    expect(served.posts).toEqual([]);
  });
});
