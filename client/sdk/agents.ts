/**
 * Agent tasks (`/v1/agents/tasks`): start a coding-agent task on files you upload, follow its events,
 * steer or cancel it, and take the diff it leaves.
 */
import { z } from "zod";
import { DiffResponse as TaskDiff, UploadFilesResponse } from "../../protocol/agents/sandbox.js";
import {
  Task,
  TaskEvent,
  type CreateTaskRequest,
  type EventType,
  type UploadTaskFilesRequest,
} from "../../protocol/agents/task.js";
import { isErrorCode, ERROR_CODES, problemType } from "../../protocol/errors.js";
import { listOf, Problem } from "../../protocol/schemas.js";
import { APIConnectionError, APIError, APITimeoutError, InvalidResponseError } from "./errors.js";
import { sleep } from "../../protocol/sleep.js";
import { retryDelay, toApiError, type HttpClient } from "./http.js";
import { messages, openStream } from "./sse.js";

export { TaskDiff };
export type TaskDiffResponse = z.infer<typeof TaskDiff>;
export type UploadedFiles = z.infer<typeof UploadFilesResponse>;

interface PerRequest {
  signal?: AbortSignal;
}

export interface TaskEventsOptions {
  /** Start after this event id (0, the default, streams the whole log). */
  after?: number;
  /** Ends the iteration, rejecting with the signal's reason. */
  signal?: AbortSignal;
  /** Reconnections in a row without a new event before giving up; default 8. */
  maxReconnects?: number;
  /** The first wait before a reconnection that follows no progress, doubled each time up to 8 s; default 500 ms. */
  reconnectDelayMs?: number;
  /** A connection that sends nothing (not even the edge's 15 s keepalive) for this long is reopened; default 45 s. */
  idleTimeoutMs?: number;
}

/** Statuses after which reopening the event stream may succeed. */
const RETRYABLE = new Set([408, 429, 500, 502, 503, 504]);

const path = (id: string, rest = "") => `/v1/agents/tasks/${encodeURIComponent(id)}${rest}`;

/**
 * `sextant.agents`: one method per route of the agent task API, each answer checked against the
 * protocol's schemas.
 *
 * @example
 * const task = await sextant.agents.create({ prompt: "Make the failing test pass", source: "upload" });
 * await sextant.agents.uploadFiles(task.id, [{ path: "src/sum.js", content: btoa(code) }]);
 * await sextant.agents.start(task.id);
 * for await (const event of sextant.agents.events(task.id)) console.log(event.type, event.data);
 * const { diff } = await sextant.agents.diff(task.id);
 */
export class Agents {
  constructor(private readonly http: HttpClient) {}

  /** A new task; with `source: "upload"` (the default) it waits in `uploading` for files and `start`. */
  create(body: CreateTaskRequest, opts: PerRequest = {}): Promise<Task> {
    return this.http.request({ method: "POST", path: "/v1/agents/tasks", body, schema: Task, ...opts });
  }

  /**
   * Adds files to an `uploading` task's tree (content base64). One request holds at most 2,000 files
   * and the edge's `MAX_BODY_BYTES`; sending a file again replaces it, so the call is retried.
   */
  uploadFiles(id: string, files: UploadTaskFilesRequest["files"], opts: PerRequest = {}): Promise<UploadedFiles> {
    return this.http.request({
      method: "POST",
      path: path(id, "/files"),
      body: { files },
      schema: UploadFilesResponse,
      idempotent: true,
      ...opts,
    });
  }

  /** Starts an uploaded task; a task already started is returned as it is. */
  start(id: string, opts: PerRequest = {}): Promise<Task> {
    return this.http.request({ method: "POST", path: path(id, "/start"), schema: Task, idempotent: true, ...opts });
  }

  get(id: string, opts: PerRequest = {}): Promise<Task> {
    return this.http.request({ method: "GET", path: path(id), schema: Task, ...opts });
  }

  /** Your org's latest 50 tasks, newest first. */
  list(opts: PerRequest = {}): Promise<Task[]> {
    return this.http
      .request({ method: "GET", path: "/v1/agents/tasks", schema: listOf(Task), ...opts })
      .then((r) => r.data);
  }

  /** A follow-up the agent reads at its next turn; a finished task runs again. */
  message(id: string, content: string, opts: PerRequest = {}): Promise<Task> {
    return this.http.request({ method: "POST", path: path(id, "/messages"), body: { content }, schema: Task, ...opts });
  }

  /** Ends the task as `cancelled`; an ended task is returned as it is. */
  cancel(id: string, opts: PerRequest = {}): Promise<Task> {
    return this.http.request({ method: "POST", path: path(id, "/cancel"), schema: Task, idempotent: true, ...opts });
  }

  /** What the task changed, as a unified diff `git apply` reads, with its counts. */
  diff(id: string, opts: PerRequest = {}): Promise<TaskDiffResponse> {
    return this.http.request({ method: "GET", path: path(id, "/diff"), schema: TaskDiff, ...opts });
  }

  /**
   * The task's events in order, each once, until `task.ended`. A connection that drops, goes quiet
   * or skips an id is reopened from the last event yielded (`Last-Event-ID`), at once after progress
   * and with growing waits otherwise.
   *
   * @example
   * for await (const event of sextant.agents.events(id, { signal: AbortSignal.timeout(600_000) })) {
   *   if (event.type === "tool.result") console.log(event.data?.tool, event.data?.ok);
   * }
   */
  events(id: string, options: TaskEventsOptions = {}): AsyncIterable<TaskEvent> {
    return { [Symbol.asyncIterator]: () => this.#follow(id, options) };
  }

  async *#follow(id: string, options: TaskEventsOptions): AsyncGenerator<TaskEvent> {
    const { signal } = options;
    const maxReconnects = options.maxReconnects ?? 8;
    const baseDelay = options.reconnectDelayMs ?? 500;
    const idleMs = options.idleTimeoutMs ?? 45_000;
    let last = options.after ?? 0;
    let lastType: EventType | undefined;
    for (let failures = 0; ; ) {
      signal?.throwIfAborted();
      const connection = new AbortController();
      const onAbort = () => connection.abort(signal!.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      let failure: Error | undefined;
      let wait: number | undefined;
      let progressed = false;
      try {
        const response = await this.#open(id, last, connection);
        if (!response.ok) {
          const error = await toApiError(response);
          if (!RETRYABLE.has(response.status)) throw error;
          failure = error;
          wait = retryDelay(response.headers, failures);
        } else {
          if (!(response.headers.get("Content-Type") ?? "").startsWith("text/event-stream"))
            throw new InvalidResponseError(
              `The edge answered the event stream with ${response.headers.get("Content-Type")}.`,
            );
          for await (const message of messages(response.body!, idleMs, connection, "The event stream")) {
            if (message.event === "error") {
              const error = streamError(message.data);
              if (error.status !== 503) throw error;
              failure = error;
              break;
            }
            const event = parseEvent(message.data);
            if (event.id <= last) continue;
            if (event.id > last + 1) {
              failure = new APIConnectionError(`The event stream skipped from ${last} to ${event.id}.`);
              break;
            }
            last = event.id;
            lastType = event.type;
            progressed = true;
            yield event;
          }
        }
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (!(err instanceof APIConnectionError)) throw err;
        failure = err;
      } finally {
        signal?.removeEventListener("abort", onAbort);
        connection.abort();
      }
      // The edge ends the stream after `task.ended`; a task resumed by a message goes on past it.
      if (lastType === "task.ended") return;
      failures = progressed ? 0 : failures + 1;
      if (failures > maxReconnects) {
        if (failure instanceof APIError) throw failure;
        throw new APIConnectionError(
          `The event stream of task ${id} failed ${failures} times in a row${failure ? `: ${failure.message}` : "."}`,
          { cause: failure },
        );
      }
      if (!progressed) await sleep(wait ?? Math.min(baseDelay * 2 ** (failures - 1), 8000), signal);
    }
  }

  #open(id: string, last: number, connection: AbortController): Promise<Response> {
    return openStream(this.http, connection, {
      path: path(id, "/events"),
      last,
      timeoutError: (timeout) => new APITimeoutError(`The event stream did not answer within ${timeout} ms.`),
    });
  }
}

function parseEvent(data: string): TaskEvent {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    throw new InvalidResponseError("The event stream sent an event whose data is not JSON.");
  }
  const parsed = TaskEvent.safeParse(json);
  if (!parsed.success)
    throw new InvalidResponseError(`An event does not match this client's protocol: ${parsed.error.message}`);
  return parsed.data;
}

const StreamError = z.object({ code: z.string(), detail: z.string().optional() });

/** The edge's `event: error` (`{ code, detail }`) as the typed error its code's status maps to. */
function streamError(data: string): APIError {
  let parsed: z.infer<typeof StreamError> | undefined;
  try {
    parsed = StreamError.safeParse(JSON.parse(data)).data;
  } catch {
    parsed = undefined;
  }
  const code = parsed && isErrorCode(parsed.code) ? parsed.code : "internal";
  const { status, title } = ERROR_CODES[code];
  const problem: Problem = {
    type: problemType(code),
    title,
    status,
    code,
    ...(parsed?.detail ? { detail: parsed.detail } : {}),
  };
  return APIError.from(status, problem, new Headers(), title);
}
