/**
 * One OpenEnv environment over env sessions: OpenEnv's reset, step and state, each made of requests
 * to the session API (`/v1/envs/sessions`), sent through the edge's own app under the caller's key.
 */
import type { z } from "zod";
import { openAiTools } from "../../protocol/agents/tools.js";
import type { CreatedSession, Session, StepResponse, VerifyResponse } from "../../protocol/envs/api.js";
import {
  OpenEnvAction,
  OpenEnvResetRequest,
  type OpenEnvObservation,
  type OpenEnvResult,
  type OpenEnvState,
} from "../../protocol/envs/openenv.js";
import { ERROR_CODES, type ErrorCode } from "../../protocol/errors.js";

/** A session request the session API refused, carried to the caller with its status and code. */
export class Refused extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    readonly detail: string,
    readonly errors?: { path: string; message: string }[],
  ) {
    super(detail);
  }
}

const isErrorCode = (code: unknown): code is ErrorCode => typeof code === "string" && code in ERROR_CODES;

/** A parse of client input whose failure is a 400 naming each field, over HTTP and the WebSocket alike. */
export function parsed<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const errors = result.error.issues.map((i) => ({
    path: i.path.map(String).join(".") || `(${what})`,
    message: i.message,
  }));
  throw new Refused(
    400,
    "invalid_request",
    `The ${what} is invalid: ${errors.map((e) => `${e.path}: ${e.message}`).join("; ")}`,
    errors,
  );
}

/** One OpenEnv environment: at most one session at a time, reached through the session API under one key. */
export class Episode {
  session: { id: string; steps: number; done: boolean } | undefined;

  constructor(
    private readonly dispatch: (request: Request) => Promise<Response>,
    private readonly origin: string,
    readonly taskset: string,
    private readonly task: string | number | undefined,
    public authorization: string | undefined,
    private readonly clientIp: string | undefined,
  ) {}

  private async api<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers = new Headers({ Authorization: this.authorization ?? "" });
    if (this.clientIp) headers.set("CF-Connecting-IP", this.clientIp);
    if (body !== undefined) headers.set("Content-Type", "application/json");
    const response = await this.dispatch(
      new Request(`${this.origin}/v1/envs/sessions${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
    if (response.status === 204) return undefined as T;
    const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
    if (!response.ok) {
      const code = isErrorCode(answer.code) ? answer.code : "internal";
      const detail = typeof answer.detail === "string" ? answer.detail : `The session API answered ${response.status}.`;
      throw new Refused(response.status, code, detail, answer.errors as Refused["errors"]);
    }
    return answer as T;
  }

  /** Starts a fresh session on the task, ending the episode's last one. */
  async reset(data: unknown): Promise<OpenEnvResult> {
    const request = parsed(OpenEnvResetRequest, data ?? {}, "reset request");
    const task = this.task ?? request.task;
    if (task === undefined) {
      throw new Refused(
        400,
        "invalid_request",
        "Name the task: in the base URL (…/openenv/{taskset}/{task}) or as `task` in reset's data.",
      );
    }
    await this.end();
    const created = await this.api<CreatedSession>("POST", "", {
      taskset: this.taskset,
      task,
      ...(request.seed != null ? { seed: request.seed } : {}),
      ...(request.limits ? { limits: request.limits } : {}),
    });
    this.session = { id: created.id, steps: created.steps, done: created.done };
    return {
      observation: {
        session_id: created.id,
        step_count: created.steps,
        messages: created.observation.messages,
        tools: created.tools,
      },
      reward: null,
      done: created.done,
    };
  }

  /** Runs one action as the session's next step; the step that ends the session is verified, and its reward answered. */
  async step(raw: unknown): Promise<OpenEnvResult> {
    const action = parsed(OpenEnvAction, raw, "action");
    const session = this.session;
    if (!session) throw new Refused(409, "conflict", "No episode: send `reset` first.");
    if ("type" in action && action.type === "list_tools") {
      const tools = openAiTools({ searchable: false }).map((t) => ({
        name: t.function.name,
        description: t.function.description ?? "",
        input_schema: t.function.parameters as Record<string, unknown>,
      }));
      return {
        observation: { session_id: session.id, step_count: session.steps, mcp_tools: tools },
        reward: null,
        done: session.done,
      };
    }
    const index = session.steps + 1;
    const call = "type" in action;
    const answer = await this.api<StepResponse>("POST", `/${session.id}/step`, {
      index,
      tool_calls: call
        ? [
            {
              id: `call_${index}`,
              type: "function",
              function: { name: action.tool_name, arguments: JSON.stringify(action.arguments) },
            },
          ]
        : action.tool_calls,
      ...(!call && action.content != null ? { content: action.content } : {}),
    });
    session.steps = answer.index;
    session.done = answer.done;
    const observation: OpenEnvObservation = {
      session_id: session.id,
      step_count: answer.index,
      results: answer.results,
      reason: answer.reason,
      usage: answer.usage,
      ...(call ? { tool_name: action.tool_name, result: answer.results[0]?.content ?? "", error: null } : {}),
    };
    let reward: number | null = null;
    if (answer.done) {
      try {
        const verified = await this.api<VerifyResponse>("POST", `/${session.id}/verify`);
        reward = verified.reward;
        observation.components = verified.components;
        observation.verifier_log = verified.log;
      } catch (err) {
        if (!(err instanceof Refused)) throw err;
        observation.verify_error = err.detail;
      }
    }
    return { observation, reward, done: answer.done };
  }

  async state(): Promise<OpenEnvState> {
    if (!this.session) return { episode_id: null, step_count: 0 };
    const s = await this.api<Session>("GET", `/${this.session.id}`);
    this.session.steps = s.steps;
    this.session.done = s.done;
    return {
      episode_id: s.id,
      step_count: s.steps,
      status: s.status,
      done: s.done,
      reason: s.reason,
      taskset: s.taskset,
      task: s.task,
      reward: s.reward,
      components: s.components,
    };
  }

  /** Ends the episode's session and its sandbox; one already gone is let go. */
  async end(): Promise<void> {
    const session = this.session;
    this.session = undefined;
    if (!session) return;
    await this.api("DELETE", `/${session.id}`).catch((err: unknown) => {
      if (!(err instanceof Refused && err.status === 404)) throw err;
    });
  }
}
