/**
 * When a stream writes its heartbeat comment (workers/gateway/heartbeat.ts), on a simulated clock:
 * the stream's timer fires at the times `check` asks for, and its events are written at the given
 * times.
 */
import { describe, expect, it } from "vitest";
import { Heartbeat, MAX_QUIET_MS } from "../../workers/gateway/heartbeat.js";

/** Runs the timer until `end`: when it looked at the stream, and when it wrote a comment. */
function simulate(heartbeatMs: number, events: number[], end: number) {
  const pace = new Heartbeat(heartbeatMs, 0);
  const checks: number[] = [];
  const beats: number[] = [];
  let next = pace.firstCheckMs;
  let i = 0;
  while (next <= end) {
    while (i < events.length && events[i]! <= next) pace.wroteEvents(events[i++]!);
    const { beat, nextMs } = pace.check(next);
    checks.push(next);
    if (beat) beats.push(next);
    next += nextMs;
  }
  return { checks, beats, pace };
}

/** Events every `gap` ms from `first`, `count` of them. */
const every = (first: number, gap: number, count: number) => Array.from({ length: count }, (_, i) => first + i * gap);

describe("a stream's heartbeat", () => {
  it("comes every heartbeatMs of silence until the first token", () => {
    const { beats } = simulate(20, [500], 500);
    expect(beats).toEqual(every(20, 20, 24));
  });

  it("stops once a steady stream's tokens show their pace, and the timer looks less and less often", () => {
    // 20 tokens/s for 3 s with the default 20 ms heartbeat: the first gap is longer than it.
    const tokens = every(20, 50, 60);
    const { checks, beats, pace } = simulate(20, tokens, tokens.at(-1)!);
    expect(beats).toEqual([40, 60]);
    expect(pace.quietMs).toBe(100);
    // Sixty tokens, and a handful of looks: doubling each time, up to MAX_QUIET_MS apart.
    expect(checks.length).toBeLessThan(10);
    for (let i = 1; i < checks.length; i++) expect(checks[i]! - checks[i - 1]!).toBeLessThanOrEqual(MAX_QUIET_MS);
  });

  it("comes again when a flowing stream stalls, within MAX_QUIET_MS of the stall, then every quiet time", () => {
    const tokens = every(20, 50, 40); // the last at 1970 ms, then nothing
    const last = tokens.at(-1)!;
    const { beats, pace } = simulate(20, tokens, last + 5_000);
    const afterStall = beats.filter((t) => t > last);
    expect(afterStall[0]! - last).toBeGreaterThanOrEqual(pace.quietMs);
    expect(afterStall[0]! - last).toBeLessThanOrEqual(MAX_QUIET_MS + pace.quietMs);
    for (let i = 1; i < afterStall.length; i++) expect(afterStall[i]! - afterStall[i - 1]!).toBe(pace.quietMs);
  });

  it("learns a slow stream's pace from its gaps, which had comments in them", () => {
    // 5 tokens/s, the pool's heartbeat 20 ms: comments fill the first gap only.
    const tokens = every(30, 200, 6);
    const { beats } = simulate(20, tokens, tokens.at(-1)!);
    expect(beats.filter((t) => t < tokens[1]!).length).toBeGreaterThan(3);
    expect(beats.filter((t) => t > tokens[1]!)).toEqual([]);
  });

  it("counts one long gap as twice the stream's pace at most", () => {
    const pace = new Heartbeat(20, 0);
    for (const t of every(0, 50, 10)) pace.wroteEvents(t);
    expect(pace.quietMs).toBe(100);
    pace.wroteEvents(450 + 10_000);
    // The sample counts as 100 ms: the average moves a quarter of the way, to 62.5 ms.
    expect(pace.quietMs).toBe(125);
  });

  it("never waits past MAX_QUIET_MS, nor less than the pool's heartbeatMs", () => {
    const slow = new Heartbeat(20, 0);
    for (const t of every(0, 5_000, 4)) slow.wroteEvents(t);
    expect(slow.quietMs).toBe(MAX_QUIET_MS);
    const fast = new Heartbeat(150, 0);
    for (const t of every(0, 10, 20)) fast.wroteEvents(t);
    expect(fast.quietMs).toBe(150);
  });
});
