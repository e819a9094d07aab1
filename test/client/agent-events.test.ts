/**
 * `sextant.agents.events()` against a local SSE server that breaks its connections the ways a real
 * network and edge do: cut mid-event, closed early, events sent again or skipped, 503s, an `error`
 * event. Every event must come out once, in order, with `Last-Event-ID` on each reconnect.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import type { TaskEvent } from "../../protocol/agents/task.js";
import { NotFoundError, Sextant } from "../../client/sdk/index.js";

const TASK = "task_events1";
const TYPES = ["turn.started", "assistant.message", "tool.call", "tool.result"] as const;

function taskEvents(count: number): TaskEvent[] {
  return Array.from({ length: count }, (_, i) => {
    const id = i + 1;
    if (id === 1) return { id, type: "task.created", at: new Date(0).toISOString(), data: { prompt: "p" } };
    if (id === count)
      return {
        id,
        type: "task.ended",
        at: new Date(0).toISOString(),
        data: { status: "finished", reason: "finished" },
      };
    // Payloads of varied length, some with newlines and multi-byte text, so cuts land anywhere.
    const text = `event ${id} ${"é✓\n".repeat(id % 7)}${"x".repeat((id * 37) % 300)}`;
    return { id, type: TYPES[id % TYPES.length]!, at: new Date(0).toISOString(), data: { text } };
  });
}

const frame = (e: TaskEvent) => `id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;

/** How one connection misbehaves. */
type Fault =
  | { kind: "cut"; bytes: number }
  | { kind: "resend"; back: number; bytes: number }
  | { kind: "skip"; ahead: number; bytes: number }
  | { kind: "close"; events: number }
  | { kind: "unavailable" }
  | { kind: "errorEvent"; events: number };

const faultArb: fc.Arbitrary<Fault> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant("cut" as const), bytes: fc.nat(3000) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("resend" as const),
      back: fc.integer({ min: 1, max: 20 }),
      bytes: fc.nat(4000),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant("skip" as const),
      ahead: fc.integer({ min: 1, max: 5 }),
      bytes: fc.nat(2000),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("close" as const), events: fc.nat(10) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("unavailable" as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("errorEvent" as const), events: fc.nat(10) }) },
);

interface Served {
  url: string;
  /** `Last-Event-ID` of each request, in order (null when absent). */
  lastEventIds: (string | null)[];
  /** Called at each request: what the client had yielded by then. */
  onRequest?: () => void;
  close(): Promise<void>;
}

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

async function serve(handler: (req: IncomingMessage, res: ServerResponse, n: number) => void): Promise<Served> {
  const served: Served = { url: "", lastEventIds: [], close: async () => undefined };
  const server = createServer((req, res) => {
    served.lastEventIds.push((req.headers["last-event-id"] as string | undefined) ?? null);
    served.onRequest?.();
    handler(req, res, served.lastEventIds.length - 1);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  served.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return served;
}

const sse = (res: ServerResponse) =>
  res.writeHead(200, { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache" });

/** Writes `text`'s first `bytes` bytes, then drops the connection without ending the response. */
function cutAfter(res: ServerResponse, text: string, bytes: number): void {
  const body = Buffer.from(text).subarray(0, bytes);
  if (body.length === 0) return void res.socket?.destroy();
  res.write(body, () => setImmediate(() => res.socket?.destroy()));
}

/** A server that answers connection `n` with `faults[n]`, and every later one properly. */
function faultyEdge(events: TaskEvent[], faults: Fault[]) {
  return serve((req, res, n) => {
    const from = Number(req.headers["last-event-id"] ?? 0);
    // A faulty connection never reaches `task.ended`, so every fault meets a stream still going.
    const upTo = faults[n] ? events.length - 1 : events.length;
    const after = (start: number) => events.slice(Math.max(0, start), upTo).map(frame).join(": keepalive\n\n");
    const fault = faults[n];
    if (!fault) {
      sse(res);
      return void res.end(after(from));
    }
    switch (fault.kind) {
      case "cut":
        sse(res);
        return cutAfter(res, after(from), fault.bytes);
      case "resend":
        sse(res);
        return cutAfter(res, after(from - fault.back), fault.bytes);
      case "skip":
        sse(res);
        return cutAfter(res, after(from + fault.ahead), fault.bytes);
      case "close":
        sse(res);
        return void res.end(
          events
            .slice(from, Math.min(from + fault.events, events.length - 1))
            .map(frame)
            .join(""),
        );
      case "unavailable":
        res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "0" });
        return void res.end(
          JSON.stringify({
            type: "/errors/unavailable",
            title: "Service unavailable",
            status: 503,
            code: "unavailable",
          }),
        );
      case "errorEvent":
        sse(res);
        return void res.end(
          events
            .slice(from, Math.min(from + fault.events, events.length - 1))
            .map(frame)
            .join("") +
            `event: error\ndata: ${JSON.stringify({ code: "unavailable", detail: "the task is busy" })}\n\n`,
        );
    }
  });
}

const sdkFor = (url: string) => new Sextant({ apiKey: generateApiKey(), baseURL: url, maxRetries: 0, timeout: 5_000 });

describe("agents.events", () => {
  it("yields every event exactly once and in order across 100 random disconnects", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(faultArb, { minLength: 100, maxLength: 100 }), async (faults) => {
        const events = taskEvents(400);
        const edge = await faultyEdge(events, faults);
        const yielded: TaskEvent[] = [];
        const expectedIds: string[] = [];
        edge.onRequest = () => expectedIds.push(String(yielded.at(-1)?.id ?? 0));
        for await (const event of sdkFor(edge.url).agents.events(TASK, {
          reconnectDelayMs: 1,
          maxReconnects: 200,
        }))
          yielded.push(event);
        expect(yielded.map((e) => e.id)).toEqual(events.map((e) => e.id));
        expect(yielded).toEqual(events);
        // One request per fault and the last, whole one; each resumes from the last event yielded.
        expect(edge.lastEventIds).toHaveLength(faults.length + 1);
        expect(edge.lastEventIds).toEqual(expectedIds);
      }),
      { seed: 20260520, numRuns: 3, endOnFailure: true },
    );
  });

  it("resumes after `after` and ends after task.ended", async () => {
    const events = taskEvents(30);
    const edge = await faultyEdge(events, []);
    const ids: number[] = [];
    for await (const e of sdkFor(edge.url).agents.events(TASK, { after: 12 })) ids.push(e.id);
    expect(ids).toEqual(events.slice(12).map((e) => e.id));
    expect(edge.lastEventIds).toEqual(["12"]);
  });

  it("stops with the signal's reason when aborted mid-stream, and closes the connection", async () => {
    const events = taskEvents(1000);
    let closed = false;
    const edge = await serve((_req, res) => {
      sse(res);
      res.on("close", () => (closed = true));
      let at = 0;
      const timer = setInterval(() => res.write(frame(events[at++]!)), 5);
      res.on("close", () => clearInterval(timer));
    });
    const controller = new AbortController();
    const seen: number[] = [];
    const reason = new Error("stop");
    await expect(
      (async () => {
        for await (const e of sdkFor(edge.url).agents.events(TASK, { signal: controller.signal })) {
          seen.push(e.id);
          if (seen.length === 5) controller.abort(reason);
        }
      })(),
    ).rejects.toBe(reason);
    expect(seen).toEqual([1, 2, 3, 4, 5]);
    await expect.poll(() => closed).toBe(true);
  });

  it("stops at once when aborted while waiting to reconnect", async () => {
    const edge = await serve((_req, res) => {
      res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "30" });
      res.end(
        JSON.stringify({ type: "/errors/unavailable", title: "Service unavailable", status: 503, code: "unavailable" }),
      );
    });
    const started = Date.now();
    const iterate = async () => {
      for await (const _ of sdkFor(edge.url).agents.events(TASK, { signal: AbortSignal.timeout(200) })) void _;
    };
    await expect(iterate()).rejects.toMatchObject({ name: "TimeoutError" });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(edge.lastEventIds).toHaveLength(1);
  });

  it("gives up after maxReconnects attempts without progress", async () => {
    const edge = await serve((_req, res) => res.socket?.destroy());
    const iterate = async () => {
      for await (const _ of sdkFor(edge.url).agents.events(TASK, { maxReconnects: 3, reconnectDelayMs: 1 })) void _;
    };
    await expect(iterate()).rejects.toMatchObject({ name: "APIConnectionError" });
    expect(edge.lastEventIds).toHaveLength(4);
  });

  it("throws the problem's typed error for an unknown task, without retrying", async () => {
    const edge = await serve((_req, res) => {
      res.writeHead(404, { "Content-Type": "application/problem+json" });
      res.end(
        JSON.stringify({
          type: "/errors/not_found",
          title: "Not found",
          status: 404,
          code: "not_found",
          detail: "No agent task `task_nope` in your org.",
        }),
      );
    });
    const iterate = async () => {
      for await (const _ of sdkFor(edge.url).agents.events("task_nope")) void _;
    };
    await expect(iterate()).rejects.toBeInstanceOf(NotFoundError);
    expect(edge.lastEventIds).toHaveLength(1);
  });
});
