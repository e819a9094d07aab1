import { describe, expect, it, vi } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { MAX_EVENTS_PER_BATCH, type EditorEvent } from "../../protocol/events.js";
import { Sextant } from "../../client/sdk/index.js";

const accepted = (n: number) =>
  new Response(JSON.stringify({ accepted: n, duplicates: 0, refused: [] }), {
    status: 202,
    headers: { "Content-Type": "application/json" },
  });

/** A `fetch` that answers with `answer(call)` and keeps the events of every request it was sent. */
function edge(answer: (events: EditorEvent[], call: number) => Response | Promise<Response>) {
  const sent: EditorEvent[][] = [];
  const fetch = async (_input: RequestInfo | URL, init: RequestInit = {}) => {
    const { events } = JSON.parse(String(init.body)) as { events: EditorEvent[] };
    sent.push(events);
    return answer(events, sent.length);
  };
  return { fetch: fetch as typeof globalThis.fetch, sent };
}

const client = (fetch: typeof globalThis.fetch) =>
  new Sextant({ apiKey: generateApiKey(), baseURL: "http://edge.test", fetch, maxRetries: 2 });

const shown = (i: number): EditorEvent => ({ id: `evt-${String(i).padStart(8, "0")}`, type: "tab.shown", at: 1 });

describe("sextant.events", () => {
  it("splits past 500 events a request and offsets each refusal's index into the whole list", async () => {
    const { fetch, sent } = edge((events, call) =>
      call === 2
        ? new Response(
            JSON.stringify({
              accepted: events.length - 1,
              duplicates: 0,
              refused: [{ index: 3, id: events[3]!.id, code: "invalid_event", detail: "bad" }],
            }),
            { status: 202, headers: { "Content-Type": "application/json" } },
          )
        : accepted(events.length),
    );
    const events = Array.from({ length: MAX_EVENTS_PER_BATCH + 10 }, (_, i) => shown(i));
    const answer = await client(fetch).events.send(events);
    expect(sent.map((s) => s.length)).toEqual([MAX_EVENTS_PER_BATCH, 10]);
    expect(answer.accepted).toBe(MAX_EVENTS_PER_BATCH + 9);
    expect(answer.refused).toEqual([
      {
        index: MAX_EVENTS_PER_BATCH + 3,
        id: events[MAX_EVENTS_PER_BATCH + 3]!.id,
        code: "invalid_event",
        detail: "bad",
      },
    ]);
  });

  it("answers a request whose every event was refused (a 400) with the refusals, not an error", async () => {
    const refused = [{ index: 0, id: null, code: "invalid_event", detail: "id: Required" }];
    const { fetch } = edge(
      () =>
        new Response(
          JSON.stringify({
            type: "/errors/invalid_request",
            title: "Invalid request",
            status: 400,
            code: "invalid_request",
            refused,
          }),
          { status: 400, headers: { "Content-Type": PROBLEM_CONTENT_TYPE } },
        ),
    );
    expect(await client(fetch).events.send([shown(1)])).toEqual({ accepted: 0, duplicates: 0, refused });
  });

  it("retries a 503 with the same event ids", async () => {
    const { fetch, sent } = edge((events, call) =>
      call === 1
        ? new Response("{}", { status: 503, headers: { "Retry-After": "0", "Content-Type": "application/json" } })
        : accepted(events.length),
    );
    await client(fetch).events.send([shown(1), shown(2)]);
    expect(sent).toHaveLength(2);
    expect(sent[1]).toEqual(sent[0]);
  });
});

describe("EventRecorder", () => {
  it("fills in ids and times, batches, and keeps a failed batch for the next send", async () => {
    let down = true;
    const { fetch, sent } = edge((events) =>
      down ? Promise.reject(new Error("connection refused")) : accepted(events.length),
    );
    const errors: unknown[] = [];
    const recorder = new Sextant({
      apiKey: generateApiKey(),
      baseURL: "http://edge.test",
      fetch,
      maxRetries: 0,
    }).events.recorder({
      flushIntervalMs: 60_000,
      onError: (err) => errors.push(err),
    });
    const first = recorder.record({ type: "tab.rejected" });
    expect(first.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(typeof first.at).toBe("number");
    recorder.record({ type: "tab.ignored", id: "evt-given-01" });
    await recorder.flush();
    expect(errors).toHaveLength(1);
    down = false;
    await recorder.close();
    expect(sent.at(-1)!.map((e) => e.id)).toEqual([first.id, "evt-given-01"]);
    expect(recorder.dropped).toBe(0);
  });

  it("sends at 500 events without waiting for its interval, and drops a batch the edge refuses outright", async () => {
    const { fetch, sent } = edge((events, call) =>
      call === 1
        ? accepted(events.length)
        : new Response(
            JSON.stringify({ type: "/errors/unauthenticated", title: "x", status: 401, code: "unauthenticated" }),
            {
              status: 401,
              headers: { "Content-Type": PROBLEM_CONTENT_TYPE },
            },
          ),
    );
    const recorder = client(fetch).events.recorder({ flushIntervalMs: 60_000, onError: () => {} });
    for (let i = 0; i < MAX_EVENTS_PER_BATCH; i++) recorder.record({ type: "tab.shown" });
    // The 500th record sends the batch; the interval (a minute) has not come.
    await vi.waitFor(() => expect(sent).toHaveLength(1));
    expect(sent[0]).toHaveLength(MAX_EVENTS_PER_BATCH);
    recorder.record({ type: "tab.shown" });
    await recorder.close();
    // A revoked key's batch would only be refused again.
    expect(recorder.dropped).toBe(1);
  });
});
