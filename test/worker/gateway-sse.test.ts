import { describe, expect, it } from "vitest";
import { SseReader } from "../../workers/gateway/sse.js";

const encoder = new TextEncoder();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A backend's body that the test writes to by hand, and whether the reader cancelled it. */
function body() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const state = { cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel() {
      state.cancelled = true;
    },
  });
  return {
    stream,
    state,
    send: (text: string) => controller.enqueue(encoder.encode(text)),
    end: () => controller.close(),
  };
}

describe("reading a backend's event stream", () => {
  it("yields events split across chunks, in order, and the end after [DONE]", async () => {
    const b = body();
    const reader = new SseReader(b.stream);
    b.send('data: {"n":1}\n\ndata: {"n"');
    b.send(":2}\n\n");
    expect(await reader.next(1_000)).toEqual({ type: "event", data: '{"n":1}' });
    expect(await reader.next(1_000)).toEqual({ type: "event", data: '{"n":2}' });
    b.send("data: [DONE]\n\n");
    // `[DONE]` ends the answer without waiting for the body's own end.
    expect(await reader.next(1_000)).toEqual({ type: "end", done: true });
    reader.close(() => {});
    expect(b.state.cancelled).toBe(false);
  });

  it("says when [DONE] came with the last events, once every event before it is taken", async () => {
    const b = body();
    const reader = new SseReader(b.stream);
    b.send('data: {"n":1}\n\n');
    expect(await reader.next(1_000)).toEqual({ type: "event", data: '{"n":1}' });
    expect(reader.drainedToDone).toBe(false);
    b.send('data: {"n":2}\n\ndata: {"n":3}\n\ndata: [DONE]\n\n');
    expect(await reader.next(1_000)).toEqual({ type: "event", data: '{"n":2}' });
    expect(reader.drainedToDone).toBe(false); // {"n":3} is still queued
    expect(reader.shift()).toEqual({ type: "event", data: '{"n":3}' });
    expect(reader.drainedToDone).toBe(true);
    expect(await reader.next(1_000)).toEqual({ type: "end", done: true });
  });

  it("reports a body that ends without [DONE] as an end that is not done", async () => {
    const b = body();
    const reader = new SseReader(b.stream);
    b.send('data: {"n":1}\n\n');
    b.end();
    expect(await reader.next(1_000)).toEqual({ type: "event", data: '{"n":1}' });
    expect(await reader.next(1_000)).toEqual({ type: "end", done: false });
    expect(reader.drainedToDone).toBe(false);
  });

  it("times out after the given silence and cancels the backend's stream", async () => {
    const b = body();
    const reader = new SseReader(b.stream);
    const started = Date.now();
    expect(await reader.next(60)).toEqual({ type: "timeout" });
    expect(Date.now() - started).toBeGreaterThanOrEqual(50);
    expect(b.state.cancelled).toBe(true);
    expect(await reader.next(60)).toEqual({ type: "timeout" });
  });

  it("does not time out a stream whose events keep arriving within the timeout, however long it runs", async () => {
    const b = body();
    const reader = new SseReader(b.stream);
    const writer = (async () => {
      for (let n = 0; n < 8; n++) {
        await sleep(250);
        b.send(`data: {"n":${n}}\n\n`);
      }
      b.send("data: [DONE]\n\n");
    })();
    const seen: string[] = [];
    for (;;) {
      // Each wait is shorter than the whole stream (2 s), and far longer than any gap even on a
      // loaded machine: only the silence between events counts.
      const item = await reader.next(1_500);
      if (item.type !== "event") {
        expect(item).toEqual({ type: "end", done: true });
        break;
      }
      seen.push(item.data);
    }
    await writer;
    expect(seen).toHaveLength(8);
    expect(b.state.cancelled).toBe(false);
  });

  it("honours a shorter timeout than the one its timer was set for", async () => {
    const b = body();
    const reader = new SseReader(b.stream);
    b.send('data: {"n":1}\n\n');
    expect((await reader.next(5_000)).type).toBe("event");
    const started = Date.now();
    expect(await reader.next(50)).toEqual({ type: "timeout" });
    // Well before the first timer's 5 s, however busy the machine.
    expect(Date.now() - started).toBeLessThan(4_000);
  });

  it("refuses an event that is not server-sent events as malformed", async () => {
    const b = body();
    const reader = new SseReader(b.stream);
    b.send("data: " + "x".repeat(5 * 2 ** 20));
    const item = await reader.next(1_000);
    expect(item.type).toBe("error");
  });
});
