/**
 * Rollout runs (`/v1/envs/rollouts`): a policy plays tasks of a task set in groups, each play
 * verified, each group given GRPO advantages. `run` starts a run and yields its events as they come,
 * reopening the run's event stream from the last event it yielded if the connection breaks.
 */
import { RolloutEvent, RolloutRun, type CreateRolloutsRequest, type RunSummary } from "../../protocol/envs/rollouts.js";
import { APIConnectionError, InvalidResponseError } from "./errors.js";
import { sleep } from "../../protocol/sleep.js";
import { retryDelay, toApiError, type HttpClient } from "./http.js";
import { messages, openStream } from "./sse.js";

export type { CreateRolloutsRequest, RolloutEvent, RolloutRun, RunSummary };

export interface RolloutStreamOptions {
  /** Ends the iteration, rejecting with the signal's reason. */
  signal?: AbortSignal;
  /** Reconnections in a row without a new event before giving up; default 8. */
  maxReconnects?: number;
  /** A connection that sends nothing (not even the edge's 15 s keepalive) for this long is reopened; default 45 s. */
  idleTimeoutMs?: number;
  /** Told the run's id as soon as the edge answers, before any event. */
  onRun?: (id: string) => void;
}

/** Statuses after which reopening the event stream may succeed. */
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504]);

const runPath = (id: string, rest = "") => `/v1/envs/rollouts/${encodeURIComponent(id)}${rest}`;

/**
 * `sextant.envs.rollouts`.
 *
 * @example
 * for await (const event of sextant.envs.rollouts.run({ taskset, policy: { model }, group_size: 4 })) {
 *   if (event.type === "group.ended") console.log(event.data.task.index, event.data.advantages);
 *   if (event.type === "summary") console.log(event.data.meanReward);
 * }
 */
export class Rollouts {
  constructor(private readonly http: HttpClient) {}

  /**
   * Starts a run and yields its events, each once, through its `summary`. The start is sent once (a
   * lost answer is not sent again: that would start a second run); once the run's id is known, a
   * broken stream is reopened from the last event yielded.
   */
  run(body: CreateRolloutsRequest, options: RolloutStreamOptions = {}): AsyncIterable<RolloutEvent> {
    return {
      [Symbol.asyncIterator]: () =>
        this.#follow((connection) => this.#send("POST", "/v1/envs/rollouts", connection, body), 0, options),
    };
  }

  /** A run's events after `after` (0: all of them), each once, through its `summary`. */
  events(id: string, options: RolloutStreamOptions & { after?: number } = {}): AsyncIterable<RolloutEvent> {
    return { [Symbol.asyncIterator]: () => this.#follow(null, options.after ?? 0, { ...options, id }) };
  }

  get(id: string, opts: { signal?: AbortSignal } = {}): Promise<RolloutRun> {
    return this.http.request({ method: "GET", path: runPath(id), schema: RolloutRun, ...opts });
  }

  async *#follow(
    start: ((connection: AbortController) => Promise<Response>) | null,
    after: number,
    options: RolloutStreamOptions & { id?: string },
  ): AsyncGenerator<RolloutEvent> {
    const { signal } = options;
    const maxReconnects = options.maxReconnects ?? 8;
    const idleMs = options.idleTimeoutMs ?? 45_000;
    let id = options.id;
    let last = after;
    for (let failures = 0; ; ) {
      signal?.throwIfAborted();
      const connection = new AbortController();
      const onAbort = () => connection.abort(signal!.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      let failure: Error | undefined;
      let wait: number | undefined;
      let progressed = false;
      try {
        const first = start !== null && id === undefined;
        const response = first
          ? await start(connection)
          : await this.#send("GET", runPath(id!, "/events"), connection, undefined, last);
        if (!response.ok) {
          const error = await toApiError(response);
          if (first || !RETRYABLE.has(response.status)) throw error;
          failure = error;
          wait = retryDelay(response.headers, failures);
        } else {
          if (first) {
            id = /\/v1\/envs\/rollouts\/([^/?#]+)$/.exec(response.headers.get("Location") ?? "")?.[1];
            if (!id) throw new InvalidResponseError("The edge started a run without saying its id (Location).");
            options.onRun?.(id);
          }
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

  #send(
    method: "GET" | "POST",
    path: string,
    connection: AbortController,
    body?: unknown,
    last?: number,
  ): Promise<Response> {
    return openStream(this.http, connection, {
      method,
      path,
      body,
      last,
      timeoutError: (timeout) => new APIConnectionError(`The edge did not answer within ${timeout} ms.`),
    });
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
