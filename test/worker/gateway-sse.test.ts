import { createParser } from "eventsource-parser";
import fc from "fast-check";
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
    sendBytes: (bytes: Uint8Array) => bytes.byteLength > 0 && controller.enqueue(bytes.slice()),
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

  it("reads any stream, cut anywhere, as eventsource-parser does, in its own split or by handing over", async () => {
    const text = fc.string({ unit: "grapheme", maxLength: 12 }).map((t) => t.replace(/[\r\n]/g, ""));
    const line = fc.oneof(
      { weight: 6, arbitrary: text.map((t) => `data: ${t}`) },
      text.map((t) => `data:${t}`),
      fc.constant("data"),
      fc.constant("data: [DONE]"),
      text.map((t) => `event: ${t}`),
      fc.constant("event:"),
      text.map((t) => `:${t}`),
      fc.constantFrom("id: 7", "retry: 10", "retry: soon", "other: x", "event", ""),
    );
    const stream = fc.array(fc.tuple(line, fc.constantFrom("\n", "\n", "\n", "\r\n", "\r")), { maxLength: 30 });
    await fc.assert(
      fc.asyncProperty(stream, fc.array(fc.nat(), { maxLength: 6 }), async (lines, cuts) => {
        const whole = lines.map(([l, end]) => l + end).join("");
        // What eventsource-parser alone makes of the whole stream up to [DONE], and whether it found an error first.
        const expected: { type: "event"; data: string; event?: string }[] = [];
        let failed = false;
        let done = false;
        const parser = createParser({
          onEvent: (e) => {
            if (done) return;
            if (e.data === "[DONE]") done = true;
            else
              expected.push(
                e.event ? { type: "event", data: e.data, event: e.event } : { type: "event", data: e.data },
              );
          },
          onError: () => {
            failed ||= !done;
          },
        });
        parser.feed(whole);
        // The same stream cut into chunks at `cuts`, through the reader.
        const bytes = encoder.encode(whole);
        const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
        const b = body();
        const reader = new SseReader(b.stream);
        let from = 0;
        for (const cut of [...at, bytes.length]) {
          b.sendBytes(bytes.subarray(from, cut));
          from = cut;
        }
        b.end();
        const got: unknown[] = [];
        for (;;) {
          const item = await reader.next(1_000);
          if (item.type !== "event") {
            expect([item.type, item.type === "end" && item.done], JSON.stringify(whole)).toEqual(
              failed ? ["error", false] : ["end", done],
            );
            break;
          }
          got.push(item);
        }
        // After an error the reader stops where its chunks happened to end: what it gave is where the parser began.
        if (failed) expect(expected.slice(0, got.length), JSON.stringify(whole)).toEqual(got);
        else expect(got, JSON.stringify(whole)).toEqual(expected);
      }),
      { numRuns: 400 },
    );
  });
});
