/**
 * Following a rollout run's event stream (a run of `envs.rollouts`, or the run under an eval run):
 * each event yielded once, in order, through the run's `summary`, the stream reopened from the last
 * event yielded whenever the connection breaks.
 */
import { RolloutEvent } from "../../protocol/envs/rollouts.js";
import { sleep } from "../../protocol/sleep.js";
import { APIConnectionError, InvalidResponseError } from "./errors.js";
import { retryDelay, toApiError, type HttpClient } from "./http.js";
import { messages, openStream } from "./sse.js";

export interface RunStreamOptions {
  /** Ends the iteration, rejecting with the signal's reason. */
  signal?: AbortSignal;
  /** Reconnections in a row without a new event before giving up; default 8. */
  maxReconnects?: number;
  /** A connection that sends nothing (not even the edge's 15 s keepalive) for this long is reopened; default 45 s. */
  idleTimeoutMs?: number;
}

/** Statuses after which reopening the event stream may succeed. */
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504]);

export interface FollowRun {
  http: HttpClient;
  /** The run's stream from event `after` on. */
  eventsPath: (id: string) => string;
  /** The run, when known; else `start` makes it. */
  id?: string;
  /**
   * Starts the run on a connection whose answer is the run's stream (never sent twice: a lost answer
   * would otherwise start a second run), and says the run's id from the answer.
   */
  start?: { open: (connection: AbortController) => Promise<Response>; id: (response: Response) => string };
  /** Events already read: the stream resumes after this id. */
  after: number;
  options: RunStreamOptions;
}

export async function* followRun(follow: FollowRun): AsyncGenerator<RolloutEvent> {
  const { http, options, start } = follow;
  const { signal } = options;
  const maxReconnects = options.maxReconnects ?? 8;
  const idleMs = options.idleTimeoutMs ?? 45_000;
  let id = follow.id;
  let last = follow.after;
  for (let failures = 0; ; ) {
    signal?.throwIfAborted();
    const connection = new AbortController();
    const onAbort = () => connection.abort(signal!.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    let failure: Error | undefined;
    let wait: number | undefined;
    let progressed = false;
    try {
      const first = id === undefined;
      if (first && !start) throw new TypeError("followRun needs the run's id or a way to start it");
      const response = first
        ? await start!.open(connection)
        : await openStream(http, connection, {
            path: follow.eventsPath(id!),
            last,
            timeoutError: (timeout) => new APIConnectionError(`The edge did not answer within ${timeout} ms.`),
          });
      if (!response.ok) {
        const error = await toApiError(response);
        if (first || !RETRYABLE.has(response.status)) throw error;
        failure = error;
        wait = retryDelay(response.headers, failures);
      } else {
        if (first) id = start!.id(response);
        if (!(response.headers.get("Content-Type") ?? "").startsWith("text/event-stream"))
          throw new InvalidResponseError(
            `The edge answered the run's stream with ${response.headers.get("Content-Type")}.`,
          );
        for await (const message of messages(response.body!, idleMs, connection, "The run's stream")) {
          if (message.event === "error") {
            failure = new APIConnectionError(`The run's stream ended with an error: ${message.data}`);
            break;
          }
          const event = parseEvent(message.data);
          if (event.id <= last) continue;
          if (event.id > last + 1) {
            failure = new APIConnectionError(`The run's stream skipped from ${last} to ${event.id}.`);
            break;
          }
          last = event.id;
          progressed = true;
          yield event;
          if (event.type === "summary") return;
        }
      }
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      // The start itself is never sent twice: without the run's id there is nothing to resume.
      if (!(err instanceof APIConnectionError) || id === undefined) throw err;
      failure = err;
    } finally {
      signal?.removeEventListener("abort", onAbort);
      connection.abort();
    }
    failures = progressed ? 0 : failures + 1;
    if (failures > maxReconnects)
      throw new APIConnectionError(
        `The stream of run ${id} failed ${failures} times in a row${failure ? `: ${failure.message}` : "."}`,
        { cause: failure },
      );
    if (!progressed) await sleep(wait ?? Math.min(500 * 2 ** (failures - 1), 8000), signal);
  }
}

function parseEvent(data: string): RolloutEvent {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    throw new InvalidResponseError("The run's stream sent an event whose data is not JSON.");
  }
  const parsed = RolloutEvent.safeParse(json);
  if (!parsed.success)
    throw new InvalidResponseError(`A run's event does not match this client's protocol: ${parsed.error.message}`);
  return parsed.data;
}
