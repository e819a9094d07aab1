/**
 * The stream relay: each of the backend's events is parsed and written on with the public model
 * name, usage only when the client asked for it, and one id across a resumed stream; a stream that
 * breaks after its first token resumes on another endpoint (tab) or ends with an explicit error
 * event, never a silent truncation.
 */
import { ApiError } from "../problem.js";
import type { ResolvedEndpoint } from "./config.js";
import { later } from "../later.js";
import { Heartbeat } from "./heartbeat.js";
import {
  errorEvent,
  parseEvent,
  peers,
  type Finish,
  type Leg,
  type ProxyRequest,
  type Resume,
  type StreamWin,
  type Usage,
  type Win,
} from "./legs.js";

const encoder = new TextEncoder();

const HEARTBEAT = new TextEncoder().encode(":\n\n");

/** Which backend serves a stream, as an SSE comment (clients ignore comments). */
const served = (endpoint: ResolvedEndpoint) => `: backend=${endpoint.id} region=${endpoint.region}\n\n`;

/** How a stream that broke after its first token is reported to the client, and to the logs. */
type BreakCode = "upstream_failure" | "upstream_timeout";
type BreakReason = "error-event" | "gap-timeout" | "ended-early" | "broken-stream";

function usageOf(value: unknown): Usage | undefined {
  if (!value || typeof value !== "object") return undefined;
  const usage = (value as { usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } }).usage;
  if (!usage || typeof usage !== "object") return undefined;
  return {
    promptTokens: typeof usage.prompt_tokens === "number" ? usage.prompt_tokens : 0,
    completionTokens: typeof usage.completion_tokens === "number" ? usage.completion_tokens : 0,
  };
}

interface RelayState {
  /** The first event's id, kept on every event so a resumed stream looks like one. */
  id?: unknown;
  /** Completion text sent so far (tab), for a resume. */
  text: string;
  events: number;
  /** Completion tokens of earlier legs, added to a later leg's reported usage. */
  carried: number;
  /** Prompt tokens as the first leg would have reported them. */
  promptTokens?: number;
}

/** Rewrites an event for the client: the public model name, usage captured and maybe dropped. */
function relayEvent(req: ProxyRequest, value: Record<string, unknown>, usage: Usage, state: RelayState): string | null {
  const reported = usageOf(value);
  if (reported) {
    state.promptTokens ??= Math.max(0, reported.promptTokens - (state.carried > 0 ? state.carried : 0));
    usage.promptTokens = state.promptTokens;
    usage.completionTokens = reported.completionTokens + state.carried;
    if (value.usage && typeof value.usage === "object")
      value.usage = {
        ...value.usage,
        prompt_tokens: usage.promptTokens,
        completion_tokens: usage.completionTokens,
        total_tokens: usage.promptTokens + usage.completionTokens,
      };
  }
  if (Array.isArray(value.choices) && value.choices.length === 0 && reported && !req.includeUsage) return null;
  // Not `delete`: that turns the object into a slow dictionary, which JSON.stringify then walks
  // per event; a property set to undefined is left out of the JSON all the same.
  if (!req.includeUsage && "usage" in value) value.usage = undefined;
  if ("model" in value) value.model = req.publicModel;
  if ("id" in value) {
    state.id ??= value.id;
    value.id = state.id;
  }
  if (Array.isArray(value.choices))
    for (const choice of value.choices as { text?: unknown }[])
      if (typeof choice?.text === "string") state.text += choice.text;
  state.events++;
  return `data: ${JSON.stringify(value)}\n\n`;
}

/** A whole (non-streamed) answer, with the public model name and the backend that gave it. */
export function answer(req: ProxyRequest, win: Win, usage: Usage, finish: (result: Finish) => void): Response {
  if (win.outcome.kind !== "json") throw new Error("a stream where a whole answer was expected");
  const body = win.outcome.body;
  const reported = usageOf(body);
  if (reported) Object.assign(usage, reported);
  if ("model" in body) body.model = req.publicModel;
  win.release();
  finish({ outcome: "completed", usage, endpoint: win.a.endpoint.id });
  return Response.json(body, {
    headers: { "X-Sextant-Backend": win.a.endpoint.id, "X-Sextant-Region": win.a.endpoint.region },
  });
}

/**
 * The streamed response, begun once a backend has accepted the request: it waits for the attempt
 * that wins (`winner`) and relays its events, or sends the error when none did.
 */
export function relay(
  req: ProxyRequest,
  winner: Promise<Win>,
  usage: Usage,
  finish: (result: Finish) => void,
  resume: Resume,
): Response {
  // Settled by the first read; until then a refusal must not surface as an unhandled rejection.
  winner.catch(() => {});

  let leg: Leg | undefined;
  const state: RelayState = { text: "", events: 0, carried: 0 };
  let closed = false;
  const close = (result: Finish) => {
    if (closed) return;
    closed = true;
    if (!leg) {
      // Still deciding: stop every attempt. A refusal is accounted by the decision itself; a win
      // that arrives anyway is given back here.
      req.cancel(new Error("client went away"));
      winner.then(
        (win) => {
          if (win.outcome.kind === "stream") win.outcome.reader.cancel();
          win.a.controller.abort(new Error("client went away"));
          win.release();
          finish({ outcome: "aborted", usage, endpoint: win.a.endpoint.id });
        },
        () => {},
      );
      return;
    }
    leg.outcome.reader.close(req.waitUntil);
    if (result.outcome !== "completed") leg.a.controller.abort(new Error("stream over"));
    if (!usage.completionTokens) usage.completionTokens = state.events;
    leg.release();
    finish(result);
  };
  /** Set once the backend's answer is whole; run after the client has been sent its end. */
  let completed: (() => void) | undefined;
  const gapMs = req.pool.timeouts.gapMs;
  const deadline = Date.now() + req.pool.timeouts.deadlineMs;
  const onAbort = () => close({ outcome: "aborted", usage, endpoint: leg?.a.endpoint.id });
  req.signal.addEventListener("abort", onAbort, { once: true });

  /** Waits for the attempt that wins, and sends its first token; or the error when none did. */
  const begin = async (send: (text: string) => void): Promise<boolean> => {
    let win: Win;
    try {
      win = await winner;
    } catch (err) {
      if (closed) return false;
      closed = true;
      const error = err instanceof ApiError ? err : undefined;
      send(errorEvent(error?.code ?? "upstream_failure", error?.detail ?? String(err), req.requestId));
      return false;
    }
    if (closed) return false;
    leg = { a: win.a, outcome: win.outcome as StreamWin, release: win.release };
    send(served(win.a.endpoint));
    const opening = relayEvent(req, leg.outcome.first, usage, state);
    if (opening) send(opening);
    return true;
  };

  /** A leg broke after its first token: resume elsewhere (tab), or end with an explicit error event. */
  const broke = async (
    code: BreakCode,
    reason: BreakReason,
    detail: string,
    emit: (text: string) => void,
    overloaded = false,
  ): Promise<boolean> => {
    const failed = leg!;
    if (overloaded) req.balancer.full(failed.a.endpoint, Date.now());
    else {
      const until = req.balancer.failed(failed.a.endpoint, Date.now(), peers(req));
      if (until !== undefined) req.eject(failed.a.endpoint.id, until, reason);
    }
    failed.outcome.reader.cancel();
    failed.a.controller.abort(new Error(detail));
    const next = await resume(state.text, state.events, failed.a);
    failed.release();
    req.log("stream broke", {
      pool: req.pool.name,
      endpoint: failed.a.endpoint.id,
      reason: overloaded ? "overloaded" : reason,
      events: state.events,
      resumedOn: next && !closed ? next.a.endpoint.id : null,
    });
    if (next && !closed) {
      leg = next;
      state.carried = state.events;
      emit(served(next.a.endpoint));
      const out = relayEvent(req, next.outcome.first, usage, state);
      if (out) emit(out);
      return true;
    }
    if (next) next.release();
    leg = { ...failed, release: () => {} };
    emit(errorEvent(code, `${detail} The stream is incomplete.`, req.requestId));
    close({ outcome: "failed", usage, endpoint: failed.a.endpoint.id });
    return false;
  };

  /**
   * Relays what the backend has sent since the last call: one batch of events, the end, or an
   * error event. False once the stream is over.
   */
  const step = async (send: (text: string) => void): Promise<boolean> => {
    let emitted = false;
    const emit = (text: string) => {
      emitted = true;
      send(text);
    };
    for (;;) {
      if (closed || !leg) return false;
      let item = await leg.outcome.reader.next(Math.min(gapMs, Math.max(0, deadline - Date.now())));
      if (closed) return false;
      const { a, outcome } = leg;
      let out = "";
      let problem: string | undefined;
      let overloaded = false;
      while (item.type === "event") {
        const parsed = parseEvent(item.data);
        if ("error" in parsed) {
          problem = parsed.error;
          overloaded = parsed.overloaded;
          break;
        }
        out += relayEvent(req, parsed.value, usage, state) ?? "";
        const more = outcome.reader.shift();
        if (!more) break;
        item = more;
      }
      // The backend's last events and its `[DONE]` usually come together: end in the same write.
      if (item.type === "event" && problem === undefined && outcome.reader.drainedToDone)
        item = { type: "end", done: true };
      if (out) emit(out);
      if (item.type === "event" && problem === undefined) {
        if (emitted) return true;
        continue;
      }
      if (item.type === "end" && item.done) {
        emit("data: [DONE]\n\n");
        // The answer is whole: its last bytes go out first, the bookkeeping after them.
        completed = () => {
          req.balancer.succeeded(a.endpoint);
          close({ outcome: "completed", usage, endpoint: a.endpoint.id });
        };
        return false;
      }
      const [code, reason, detail]: [BreakCode, BreakReason, string] =
        problem !== undefined
          ? ["upstream_failure", "error-event", `The backend failed mid-stream: ${problem}.`]
          : item.type === "timeout"
            ? ["upstream_timeout", "gap-timeout", `The backend sent nothing for ${gapMs} ms.`]
            : item.type === "end"
              ? ["upstream_failure", "ended-early", "The backend ended the stream early."]
              : ["upstream_failure", "broken-stream", `${(item as { message: string }).message}.`];
      if (!(await broke(code, reason, detail, emit, overloaded))) return false;
      if (emitted) return true;
    }
  };

  // The relay writes into a runtime-native stream that the response reads: each write waits until
  // the client has taken the bytes, so a client that stops reading holds the backend back, and
  // one that goes away fails the write (or the heartbeat's), which cancels the backend's request.
  // Writing from JavaScript into a native stream costs the runtime less per event than a
  // JavaScript stream that the response pulls from.
  const { readable, writable } = new IdentityTransformStream();
  const writer = writable.getWriter();
  // A quiet stream writes an SSE comment so that a client's close is noticed (heartbeat.ts).
  const pace = new Heartbeat(req.pool.heartbeatMs, Date.now());
  let heartbeat: ReturnType<typeof setTimeout> | undefined;
  /** A write the client has not taken yet: it fails by itself if the client goes away. */
  let writing = false;
  const beat = () => {
    heartbeat = undefined;
    if (closed) return;
    const { beat: due, nextMs } = pace.check(Date.now());
    if (due && !writing) writer.write(HEARTBEAT).catch(onAbort);
    heartbeat = setTimeout(beat, nextMs);
  };
  const stopHeartbeat = () => {
    if (heartbeat !== undefined) clearTimeout(heartbeat);
    heartbeat = undefined;
  };
  heartbeat = setTimeout(beat, pace.firstCheckMs);
  // A client that cancels the response errors the writable side, even with no write pending.
  writer.closed.catch(onAbort);

  const pump = async () => {
    let more = true;
    while (more) {
      let text = "";
      const send = (chunk: string) => void (text += chunk);
      try {
        more = leg ? await step(send) : await begin(send);
      } catch (err) {
        // Not expected: end the stream with an explicit error rather than a silent truncation.
        const detail = `The stream failed at the edge: ${err instanceof Error ? err.message : String(err)}.`;
        send(errorEvent("upstream_failure", detail, req.requestId));
        close({ outcome: "failed", usage, endpoint: leg?.a.endpoint.id });
        more = false;
      }
      if (!text) continue;
      pace.wroteEvents(Date.now());
      if (!more) {
        // The last bytes: the close is queued behind them (and fails if they do), so the end of
        // the body follows them at once instead of a round trip later.
        writer.write(encoder.encode(text)).catch(() => {});
        break;
      }
      writing = true;
      await writer.write(encoder.encode(text));
      writing = false;
    }
    stopHeartbeat();
    await writer.close();
    // The bookkeeping waits a turn, so that the end of the body leaves first.
    if (completed) await later();
    completed?.();
  };
  req.waitUntil(
    pump().catch(() => {
      // The client went away mid-write (if the answer was whole, it still counts as completed).
      stopHeartbeat();
      completed?.();
      onAbort();
    }),
  );
  return new Response(readable, {
    headers: {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
      "X-Accel-Buffering": "no",
    },
  });
}
