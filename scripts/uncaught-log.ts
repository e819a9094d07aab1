/**
 * Every `uncaught exception` line of vitest's output, each explained by a rule below or reported.
 *
 * The Worker tests' pool runs workerd verbose, and verbose workerd writes `uncaught exception` for
 * more than exceptions nobody caught: it traces every fetch() that fails, and every exception a
 * Durable Object's RPC method throws to its caller, whether the caller handles it or not. Those
 * lines are expected where tests point backends at a closed port or send an object bad input, and
 * they drowned the real ones. A real one is an exception that escapes a request, a `waitUntil`
 * promise or an alarm: workerd then also writes its `uncaught exception; exception = …: failed: …`
 * line for the request's context, which no rule explains. (A promise rejected and never awaited
 * inside a request is not logged by workerd at all, so no scan of this log can find one.)
 *
 * `npm test` prints vitest's output without the lines these rules name (`QuietFilter`; the file
 * .vitest/output.log keeps them), and fails when a line of the file is left unexplained;
 * `tsx scripts/uncaught-log.ts <log>…` reads saved logs the same way.
 */
import { createReadStream } from "node:fs";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { StringDecoder } from "node:string_decoder";
import { fileURLToPath } from "node:url";

export const RULES = {
  /**
   * workerd's trace of a fetch() that could not connect: `exception = …connect(): Connection
   * refused`, then `source = Uncaught (in promise); stack = Error: Network connection lost.` and
   * the context's `exception = …disconnected: jsg.Error: Network connection lost.`, even when the
   * code awaits the fetch and catches its error (the Worker tests' gateway backends listen on
   * 127.0.0.1:1, and the health object probes them every second). Explained one for one: each of
   * the two lines only up to the number of refused connections in the same log. A fetch whose
   * rejection also escapes its request writes the pair once more with no refused connection of its
   * own, so the surplus is reported.
   */
  "refused-connect": "a fetch() that could not connect, traced by workerd however its caller handled it",
  /**
   * workerd's trace of an exception a Durable Object's RPC method threw to its caller: one
   * `source = Uncaught (in promise)` line whose stack ends in the pool's RPC entry
   * (`DurableObject.fn` of @cloudflare/vitest-pool-workers), written where it was thrown. The
   * caller receives the exception; one that does not handle it fails its test or writes lines of
   * its own (its stack ends in its own handler, with the context's `failed:` line), which this rule
   * does not explain. So does a `waitUntil` promise or an alarm of the object that rejects.
   */
  "rpc-throw": "an exception a Durable Object's RPC method threw to its caller, traced by workerd where it was thrown",
  /**
   * workerd's trace of `ctx.abort()` in an object's `restart()` (the operator's restart, which tests
   * use to evict an object): `exception = …: failed: broken.outputGateBroken; jsg.Error: restarted by
   * an operator`, the reason those methods give and nothing else does.
   */
  "operator-restart": "an object restarted on purpose (ctx.abort with the operator's reason), traced by workerd",
  /**
   * workerd's trace of the lake's partition object throwing the fault a test injected on purpose
   * (`LAKE_FAULT_EVERY`: `Error: injected lake fault: …`) to the queue consumer that called it, which
   * retries the batch. The consumer is the Worker, not the test pool, so the stack does not end in
   * the pool's RPC entry; the message is the injector's own and nothing else throws it.
   */
  "injected-fault": "a fault a test injected on purpose into the lake (LAKE_FAULT_EVERY), traced where it was thrown",
} as const;

export type RuleName = keyof typeof RULES;

export interface UncaughtLine {
  /** 1-based. */
  line: number;
  text: string;
}

export interface UncaughtReport {
  /** How many `uncaught exception` lines each rule explained. */
  explained: Record<RuleName, number>;
  /** The lines no rule explains, in the log's order. */
  unexplained: UncaughtLine[];
}

const ANSI = /\x1b\[[0-9;]*m/g;
const UNCAUGHT = /uncaught exception/i;
const REFUSED = /exception = kj\/async-io-unix\.c\+\+:\d+: disconnected: connect\(\): Connection refused/;
const LOST_PROMISE =
  /uncaught exception; source = Uncaught \(in promise\); stack = Error: Network connection lost\.\s*$/;
const LOST_CONTEXT = /uncaught exception; exception = \S+: disconnected: jsg\.Error: Network connection lost\.\s*$/;
const RESTARTED =
  /uncaught exception; exception = \S+: failed: broken\.outputGateBroken; jsg\.Error: restarted by an operator\s*$/;
const INJECTED = /uncaught exception; source = Uncaught \(in promise\); stack = Error: injected lake fault: /;
const THROWN = /uncaught exception; source = Uncaught(?: \(in promise\))?; stack = /;
const RPC_ENTRY =
  /^\s+at (?:async )?DurableObject\.fn \(\S*@cloudflare\/vitest-pool-workers\/dist\/worker\/lib\/cloudflare\/test-internal\.mjs:\d+:\d+\)$/;
const FRAME = /^\s+at /;
/**
 * Whether `text` goes on an exception whose stack has `framed` frames so far: its message's lines
 * (indented by two or more, or a JSON bracket) until the first frame, then frames only.
 */
const continues = (text: string, framed: boolean) =>
  FRAME.test(text) || (!framed && /^(?:\s{2,}\S|[\]}],?\s*$)/.test(text) && !UNCAUGHT.test(text));

/** Reads a log's lines in order and says, at the end, which `uncaught exception` lines no rule explains. */
export class UncaughtLedger {
  private refused = 0;
  private lostPromise: UncaughtLine[] = [];
  private lostContext: UncaughtLine[] = [];
  private thrown: UncaughtLine[] = [];
  private rpc = 0;
  private restarted = 0;
  private injected = 0;
  private other: UncaughtLine[] = [];
  /** A thrown exception's line, until its stack has been read. */
  private pending: { at: UncaughtLine; lastFrame: string | undefined } | undefined;

  push(raw: string, line: number): void {
    const text = raw.replace(ANSI, "");
    if (this.pending) {
      if (continues(text, this.pending.lastFrame !== undefined)) {
        if (FRAME.test(text)) this.pending.lastFrame = text;
        return;
      }
      this.settle();
    }
    if (REFUSED.test(text)) this.refused++;
    if (!UNCAUGHT.test(text)) return;
    const at = { line, text };
    if (LOST_PROMISE.test(text)) this.lostPromise.push(at);
    else if (LOST_CONTEXT.test(text)) this.lostContext.push(at);
    else if (RESTARTED.test(text)) this.restarted++;
    else if (THROWN.test(text)) this.pending = { at, lastFrame: undefined };
    else this.other.push(at);
  }

  private settle(): void {
    const { at, lastFrame } = this.pending!;
    this.pending = undefined;
    if (lastFrame !== undefined && RPC_ENTRY.test(lastFrame)) this.rpc++;
    else if (INJECTED.test(at.text)) this.injected++;
    else this.thrown.push(at);
  }

  finish(): UncaughtReport {
    if (this.pending) this.settle();
    const promises = Math.min(this.lostPromise.length, this.refused);
    const contexts = Math.min(this.lostContext.length, promises);
    const unexplained = [
      ...this.lostPromise.slice(promises),
      ...this.lostContext.slice(contexts),
      ...this.thrown,
      ...this.other,
    ].sort((a, b) => a.line - b.line);
    return {
      explained: {
        "refused-connect": promises + contexts,
        "rpc-throw": this.rpc,
        "operator-restart": this.restarted,
        "injected-fault": this.injected,
      },
      unexplained,
    };
  }
}

/**
 * What `npm test` prints of vitest's output: the lines the rules name (with workerd's native
 * `stack:` line after each) left out, everything else passed on as it comes. It decides by the
 * lines' form alone, so the count of each rule is kept by the check of the whole log at the end of
 * the run, which names any line the filter left out and the rules do not explain (a surplus
 * connection-lost pair); the file keeps every line.
 */
export class QuietFilter {
  private decoder = new StringDecoder("utf8");
  private partial = "";
  /** A thrown exception's lines, held until its stack says whether the RPC rule names it. */
  private held: { lines: string[]; lastFrame: string | undefined } | undefined;
  /** Whether the line before was left out, so that workerd's `stack:` line after it goes too. */
  private dropStack = false;

  /** The part of `chunk` to print now: whole lines only, the rest once its line ends. */
  write(chunk: Buffer | string): string {
    const text = this.partial + (typeof chunk === "string" ? chunk : this.decoder.write(chunk));
    const lines = text.split("\n");
    this.partial = lines.pop()!;
    return lines.map((line) => this.line(line)).join("");
  }

  /** Whatever is still held, at the end of the stream. */
  end(): string {
    const rest = this.partial + this.decoder.end();
    this.partial = "";
    return (rest ? this.line(rest).replace(/\n$/, "") : "") + this.release();
  }

  private line(raw: string): string {
    const text = raw.replace(ANSI, "");
    let out = "";
    if (this.held) {
      if (continues(text, this.held.lastFrame !== undefined)) {
        this.held.lines.push(raw);
        if (FRAME.test(text)) this.held.lastFrame = text;
        return "";
      }
      out = this.release();
    }
    if (this.dropStack && text.startsWith("stack: ")) {
      this.dropStack = false;
      return out;
    }
    this.dropStack = false;
    if (REFUSED.test(text) || LOST_PROMISE.test(text) || LOST_CONTEXT.test(text) || RESTARTED.test(text)) {
      this.dropStack = true;
      return out;
    }
    if (THROWN.test(text)) {
      this.held = { lines: [raw], lastFrame: undefined };
      return out;
    }
    return out + raw + "\n";
  }

  private release(): string {
    const held = this.held;
    this.held = undefined;
    if (!held) return "";
    if (
      (held.lastFrame !== undefined && RPC_ENTRY.test(held.lastFrame)) ||
      INJECTED.test(held.lines[0]!.replace(ANSI, ""))
    ) {
      this.dropStack = true;
      return "";
    }
    return held.lines.map((line) => line + "\n").join("");
  }
}

/** The report of a log held as one string. */
export function explainUncaught(log: string): UncaughtReport {
  const ledger = new UncaughtLedger();
  log.split(/\r?\n/).forEach((text, i) => ledger.push(text, i + 1));
  return ledger.finish();
}

/** The report of a log file, read a line at a time: a full run's output can outgrow one string. */
export async function explainUncaughtFile(file: string): Promise<UncaughtReport> {
  const ledger = new UncaughtLedger();
  let line = 0;
  for await (const text of createInterface({ input: createReadStream(file), crlfDelay: Infinity }))
    ledger.push(text, ++line);
  return ledger.finish();
}

/** "refused-connect 100, rpc-throw 6": what each rule explained. */
export function describeExplained(report: UncaughtReport): string {
  return Object.entries(report.explained)
    .map(([rule, count]) => `${rule} ${count}`)
    .join(", ");
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  let unexplained = 0;
  for (const file of process.argv.slice(2)) {
    const report = await explainUncaughtFile(file);
    console.log(`${file}: explained ${describeExplained(report)}; unexplained ${report.unexplained.length}`);
    for (const at of report.unexplained) console.log(`${file}:${at.line}: ${at.text}`);
    unexplained += report.unexplained.length;
  }
  process.exit(unexplained === 0 ? 0 : 1);
}
