/**
 * When a stream writes an SSE comment to its client. A connection's close is noticed only at a
 * write, so a stream that has sent nothing for a while writes a comment (clients ignore them), and
 * a cancel reaches the backend within about that while. Until the stream has shown its pace, that
 * while is the pool's `heartbeatMs`. Once tokens flow their own writes notice a close within a
 * gap, so a comment goes out only after a silence longer than `heartbeatMs` and twice the stream's
 * own gap between tokens (a running average in which one long gap counts as twice the average at
 * most), and never later than `MAX_QUIET_MS`.
 *
 * A timer costs the runtime about as much as one of the stream's events, so the stream's one timer
 * is not moved at every write: it looks at the stream when it fires (`check`), and while a stream
 * of known pace keeps flowing it looks again twice as late each time, up to `MAX_QUIET_MS`, within
 * which a stall is noticed.
 */

/** The longest a stream goes quiet, or between two looks for a stall, before a comment. */
export const MAX_QUIET_MS = 1_000;

export class Heartbeat {
  private lastWrite: number;
  /** When the last events were written (undefined before the first). */
  private lastEvents: number | undefined;
  /** The stream's own gap between event writes, ms (0 until it has had one). */
  private gapMs = 0;
  private checkMs: number;

  constructor(
    private readonly heartbeatMs: number,
    now: number,
  ) {
    this.lastWrite = now;
    this.checkMs = heartbeatMs;
  }

  /** How long the stream may stay silent before a comment. */
  get quietMs(): number {
    return Math.max(this.heartbeatMs, Math.min(MAX_QUIET_MS, 2 * this.gapMs));
  }

  /** When to look first, ms from the start. */
  get firstCheckMs(): number {
    return this.heartbeatMs;
  }

  /** Events were written at `now`: the stream's pace learns from it. */
  wroteEvents(now: number): void {
    if (this.lastEvents !== undefined) {
      const gap = now - this.lastEvents;
      const sample = this.gapMs > 0 ? Math.min(gap, 2 * this.gapMs) : gap;
      this.gapMs = this.gapMs === 0 ? Math.max(1, sample) : this.gapMs + (sample - this.gapMs) / 4;
    }
    this.lastEvents = now;
    this.lastWrite = now;
  }

  /** The timer fired at `now`: whether to write a comment now, and when to look again (ms). */
  check(now: number): { beat: boolean; nextMs: number } {
    const quiet = this.quietMs;
    const silent = now - this.lastWrite;
    let beat = false;
    if (silent >= quiet) {
      beat = true;
      this.lastWrite = now;
      this.checkMs = quiet;
    } else if (this.gapMs > 0) this.checkMs = Math.min(MAX_QUIET_MS, Math.max(quiet - silent, 2 * this.checkMs));
    else this.checkMs = quiet - silent;
    return { beat, nextMs: Math.max(1, this.checkMs) };
  }
}
