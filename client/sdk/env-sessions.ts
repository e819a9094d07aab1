/**
 * Environment sessions (`/v1/envs/sessions`): the caller's own model drives the production agent's
 * tools on one task of a task set, one step at a time, then asks for the task's reward.
 */
import { DiffResponse } from "../../protocol/agents/sandbox.js";
import {
  CreatedSession,
  Session as SessionState,
  StepResponse,
  VerifyResponse,
  type CreateSessionRequest,
} from "../../protocol/envs/api.js";
import { SextantError } from "./errors.js";
import type { HttpClient } from "./http.js";

export type { CreateSessionRequest, CreatedSession, SessionState, StepResponse, VerifyResponse };
export type SessionDiff = DiffResponse;

interface PerRequest {
  signal?: AbortSignal;
}

/**
 * A tool call as OpenAI's chat API gives it. `arguments` may be an object (it is sent as JSON); a
 * call with no `id` is named `call_<step>_<position>`, so that sending the step again sends the same ids.
 */
export interface StepToolCall {
  id?: string;
  type?: "function";
  function: { name: string; arguments: string | Record<string, unknown> };
}

export interface StepOptions extends PerRequest {
  /** The step's number; default one past the last step the edge answered. */
  index?: number;
  /** The assistant's text beside its calls, kept in the session's conversation. */
  content?: string | null;
}

const sessionPath = (id: string, rest = "") => `/v1/envs/sessions/${encodeURIComponent(id)}${rest}`;

/**
 * `sextant.envs.sessions`.
 *
 * @example
 * const session = await sextant.envs.sessions.create({ taskset, task: 0 });
 * const messages = [...session.observation.messages];
 * while (!session.done) {
 *   const reply = await model(messages, session.tools);
 *   const { results } = await session.step(reply.tool_calls ?? [], { content: reply.content });
 *   messages.push(reply, ...results);
 * }
 * const { reward } = await session.verify();
 * await session.close();
 */
export class EnvSessions {
  constructor(private readonly http: HttpClient) {}

  /**
   * Starts a session on one task of a set (`task`: its index from 0, or its archive's SHA-256): a
   * sandbox holding the task's environment, the production agent's tools, and the first observation.
   * Sent once: a lost answer is not sent again, since that would start a second session.
   */
  async create(body: CreateSessionRequest, opts: PerRequest = {}): Promise<EnvSession> {
    const created = await this.http.request({
      method: "POST",
      path: "/v1/envs/sessions",
      body,
      schema: CreatedSession,
      ...opts,
    });
    return new EnvSession(this.http, created);
  }

  /** A session's state; another org's session is a `NotFoundError`. */
  get(id: string, opts: PerRequest = {}): Promise<SessionState> {
    return this.http.request({ method: "GET", path: sessionPath(id), schema: SessionState, ...opts });
  }
}

/** One episode in one sandbox. Step it from one place at a time: it counts its own steps. */
export class EnvSession {
  readonly id: string;
  /** The production agent's tools, as OpenAI tool schemas to offer the model. */
  readonly tools: unknown[];
  /** The conversation's start: the system prompt and the task's instruction. */
  readonly observation: CreatedSession["observation"];
  readonly limits: CreatedSession["limits"];
  /** The last step the edge answered (0 before the first); the next step is one more. */
  index: number;
  /** No step runs after this: `finish` was called, a budget is spent, or the session was verified. */
  done: boolean;
  reason: string | null;
  #stepping = false;

  constructor(
    private readonly http: HttpClient,
    created: CreatedSession,
  ) {
    this.id = created.id;
    this.tools = created.tools;
    this.observation = created.observation;
    this.limits = created.limits;
    this.index = created.steps;
    this.done = created.done;
    this.reason = created.reason;
  }

  /**
   * Runs the model's tool calls as the production agent loop runs them and answers their results.
   * The index moves on only when an answer comes: a step whose answer is lost is sent again with the
   * same index (by the client's retries, or by calling `step` again), and the edge answers the step
   * it already ran instead of running its calls twice. A step after the session is done is a
   * `ConflictError`.
   */
  async step(toolCalls: readonly StepToolCall[], opts: StepOptions = {}): Promise<StepResponse> {
    const { index: explicit, content, ...perRequest } = opts;
    // Two steps sent at once would both take the next index, and the second would get the first's answer.
    if (this.#stepping && explicit === undefined)
      throw new SextantError("A step is already in flight on this session: await it before sending the next.");
    const index = explicit ?? this.index + 1;
    this.#stepping = true;
    try {
      const answer = await this.http.request({
        method: "POST",
        path: sessionPath(this.id, "/step"),
        body: {
          index,
          tool_calls: toolCalls.map((call, position) => toolCall(call, index, position)),
          ...(content !== undefined ? { content } : {}),
        },
        schema: StepResponse,
        idempotent: true,
        ...perRequest,
      });
      this.index = Math.max(this.index, answer.index);
      if (answer.done) {
        this.done = true;
        this.reason = answer.reason;
      }
      return answer;
    } finally {
      this.#stepping = false;
    }
  }

  /** Runs the task's tests on the tree as the steps left it: the same answer every time, and no step after it. */
  async verify(opts: PerRequest = {}): Promise<VerifyResponse> {
    const verdict = await this.http.request({
      method: "POST",
      path: sessionPath(this.id, "/verify"),
      schema: VerifyResponse,
      idempotent: true,
      ...opts,
    });
    this.done = true;
    this.reason = "verified";
    return verdict;
  }

  state(opts: PerRequest = {}): Promise<SessionState> {
    return this.http.request({ method: "GET", path: sessionPath(this.id), schema: SessionState, ...opts });
  }

  /** The tree's changes against the task's environment, as a unified diff `git apply` reads. */
  diff(opts: PerRequest = {}): Promise<SessionDiff> {
    return this.http.request({ method: "GET", path: sessionPath(this.id, "/diff"), schema: DiffResponse, ...opts });
  }

  /** Ends the session and destroys its sandbox; its state stays readable. */
  async close(opts: PerRequest = {}): Promise<void> {
    await this.http.request({ method: "DELETE", path: sessionPath(this.id), ...opts });
    this.done = true;
  }
}

function toolCall(call: StepToolCall, index: number, position: number) {
  const { name, arguments: args } = call.function;
  return {
    id: call.id ?? `call_${index}_${position}`,
    type: "function" as const,
    function: { name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
  };
}
