/**
 * Rollout runs (`/v1/envs/rollouts`): a policy plays tasks of a task set in groups, each play
 * verified, each group given GRPO advantages. `run` starts a run and yields its events as they come,
 * reopening the run's event stream from the last event it yielded if the connection breaks.
 */
import {
  RolloutRun,
  type CreateRolloutsRequest,
  type RolloutEvent,
  type RunSummary,
} from "../../protocol/envs/rollouts.js";
import { APIConnectionError, InvalidResponseError } from "./errors.js";
import type { HttpClient } from "./http.js";
import { followRun, type RunStreamOptions } from "./run-events.js";
import { openStream } from "./sse.js";

export type { CreateRolloutsRequest, RolloutEvent, RolloutRun, RunSummary };

export interface RolloutStreamOptions extends RunStreamOptions {
  /** Told the run's id as soon as the edge answers, before any event. */
  onRun?: (id: string) => void;
}

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
    const start = {
      open: (connection: AbortController) =>
        openStream(this.http, connection, {
          method: "POST",
          path: "/v1/envs/rollouts",
          body,
          timeoutError: (timeout) => new APIConnectionError(`The edge did not answer within ${timeout} ms.`),
        }),
      id: (response: Response) => {
        const id = /\/v1\/envs\/rollouts\/([^/?#]+)$/.exec(response.headers.get("Location") ?? "")?.[1];
        if (!id) throw new InvalidResponseError("The edge started a run without saying its id (Location).");
        options.onRun?.(id);
        return id;
      },
    };
    return {
      [Symbol.asyncIterator]: () =>
        followRun({ http: this.http, eventsPath: (id) => runPath(id, "/events"), start, after: 0, options }),
    };
  }

  /** A run's events after `after` (0: all of them), each once, through its `summary`. */
  events(id: string, options: RolloutStreamOptions & { after?: number } = {}): AsyncIterable<RolloutEvent> {
    return {
      [Symbol.asyncIterator]: () =>
        followRun({
          http: this.http,
          eventsPath: (run) => runPath(run, "/events"),
          id,
          after: options.after ?? 0,
          options,
        }),
    };
  }

  get(id: string, opts: { signal?: AbortSignal } = {}): Promise<RolloutRun> {
    return this.http.request({ method: "GET", path: runPath(id), schema: RolloutRun, ...opts });
  }
}
