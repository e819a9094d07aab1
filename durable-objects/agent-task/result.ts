/**
 * What a task object's RPC methods answer: a value, or why not, which the route turns into a
 * problem document. A method's expected failures (no such task, the wrong moment, the sandbox host
 * unreachable or gone) become results; anything else is thrown.
 */
import { SandboxUnavailable } from "./sandbox-client.js";

export class TaskNotReady extends Error {
  override readonly name = "TaskNotReady";
  constructor(
    message: string,
    readonly missing = false,
  ) {
    super(message);
  }
}

/** What a task's RPC methods answer: a value, or why not (the route turns it into a problem document). */
export type TaskResult<T> =
  | { ok: true; value: T }
  | { ok: false; code: "not_found" | "conflict" | "unavailable"; message: string };

export async function guarded<T>(fn: () => Promise<T>): Promise<TaskResult<T>> {
  try {
    return { ok: true, value: await fn() };
  } catch (err) {
    if (err instanceof TaskNotReady)
      return { ok: false, code: err.missing ? "not_found" : "conflict", message: err.message };
    if (err instanceof SandboxUnavailable)
      return {
        ok: false,
        code: err.status === 404 ? "conflict" : "unavailable",
        message:
          err.status === 404
            ? "The task's sandbox is gone (it ended and sat idle past its time to live)."
            : err.message,
      };
    throw err;
  }
}
