/**
 * OpenEnv's side of the OpenEnv front's tests: its types as JSON Schemas (made from its pydantic models
 * at a pinned commit, test/fixtures/openenv/types.schema.json), a WebSocket client that speaks its
 * protocol as its `EnvClient` does, and a task directory packed as the edge takes it.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { Ajv2020 } from "ajv/dist/2020.js";
import { packTar } from "modern-tar";
import { WebSocket } from "undici";
import { expect } from "vitest";
import { ROOT } from "./local-edge.js";

const OPENENV = JSON.parse(readFileSync(join(ROOT, "test/fixtures/openenv/types.schema.json"), "utf8")) as {
  schemas: Record<string, object>;
};
const ajv = new Ajv2020({ strict: false, allErrors: true });

/** Asserts `value` is an instance of OpenEnv's model `name`, listing what is not. */
export function conforms(name: string, value: unknown): void {
  const validate = ajv.getSchema(name) ?? (ajv.addSchema(OPENENV.schemas[name]!, name), ajv.getSchema(name)!);
  const ok = validate(value);
  expect(ok, `${name}: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(value).slice(0, 2000)}`).toBe(true);
}

/** A task directory as a gzip'd tar, entries sorted, paths relative to the task's root. */
export async function archiveOf(dir: string): Promise<Buffer> {
  const files: string[] = [];
  const walk = (at: string) => {
    for (const name of readdirSync(at).sort()) {
      const path = join(at, name);
      if (statSync(path).isDirectory()) walk(path);
      else files.push(path);
    }
  };
  walk(dir);
  const entries = files.map((path) => {
    const body = readFileSync(path);
    const header = { name: relative(dir, path), type: "file" as const, size: body.byteLength, mtime: new Date(0) };
    return { header: { ...header, mode: statSync(path).mode & 0o777 }, body };
  });
  return gzipSync(await packTar(entries));
}

/** A WebSocket to the front as OpenEnv's client opens it, with every answer queued in order. */
export class Socket {
  readonly ws: WebSocket;
  private readonly inbox: unknown[] = [];
  private waiting: ((m: unknown) => void) | undefined;
  readonly closed: Promise<{ code: number; reason: string }>;
  readonly opened: Promise<void>;

  /** `url`: the environment's base URL (http:// or https://), as OpenEnv's client is given it. */
  constructor(url: string, headers: Record<string, string> = {}) {
    this.ws = new WebSocket(`${url.replace(/^http/, "ws")}/ws`, { headers });
    this.opened = new Promise((resolve, reject) => {
      this.ws.addEventListener("open", () => resolve());
      this.ws.addEventListener("error", () => reject(new Error("the socket did not open")));
    });
    this.closed = new Promise((resolve) =>
      this.ws.addEventListener("close", (e) => resolve({ code: e.code, reason: e.reason })),
    );
    this.ws.addEventListener("message", (e) => {
      const message = JSON.parse(String(e.data)) as unknown;
      if (this.waiting) {
        this.waiting(message);
        this.waiting = undefined;
      } else this.inbox.push(message);
    });
  }

  /** Sends a message, checked first against OpenEnv's type for it, and answers the reply. */
  async ask(message: { type: string; data?: unknown }): Promise<{ type: string; data: Record<string, unknown> }> {
    const model = { reset: "WSResetMessage", step: "WSStepMessage", state: "WSStateMessage" }[message.type];
    if (model) conforms(model, message);
    await this.opened;
    this.ws.send(JSON.stringify(message));
    return this.next();
  }

  next(): Promise<{ type: string; data: Record<string, unknown> }> {
    const queued = this.inbox.shift();
    if (queued !== undefined) return Promise.resolve(queued as never);
    return new Promise((resolve) => (this.waiting = resolve as (m: unknown) => void));
  }
}

/** An answer is an observation, checked as OpenEnv's `WSObservationResponse` and `data` as `type`. */
export function observation(
  answer: { type: string; data: Record<string, unknown> },
  type: "ResetResponse" | "StepResponse",
) {
  expect(answer.type, JSON.stringify(answer)).toBe("observation");
  conforms("WSObservationResponse", answer);
  conforms(type, answer.data);
  return answer.data as {
    observation: Record<string, unknown> & { session_id: string; step_count: number };
    reward: number | null;
    done: boolean;
  };
}

export function wsError(answer: { type: string; data: Record<string, unknown> }) {
  expect(answer.type, JSON.stringify(answer)).toBe("error");
  conforms("WSErrorResponse", answer);
  return answer.data as { message: string; code: string; status?: number; error?: string };
}

/** A turn of one `run_terminal` call. */
export const runTerminal = (id: string, command: string) => ({
  tool_calls: [{ id, type: "function", function: { name: "run_terminal", arguments: JSON.stringify({ command }) } }],
});
