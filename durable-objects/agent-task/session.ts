/**
 * An AgentTask on a task-set task: an environment session (kind `env`), whose turns come from its
 * client's step requests instead of a model, or a rollout (kind `rollout`), the production loop on
 * the task with a run's model, verified when it ends and reported to its run.
 *
 * A step is a turn of the production loop with the answer given: the assistant message and its
 * calls are recorded in one transaction (`recordTurn`), then run as the loop runs them
 * (`runRecordedCalls`: same schedule, same call ids, same result text and budgets), and each call's
 * tool message is kept, so a step already run is answered from storage and no call runs twice,
 * across evictions and lost requests alike. A session's requests run one at a time.
 */
import { SandboxLimits } from "../../protocol/agents/sandbox.js";
import { openAiTools } from "../../protocol/agents/tools.js";
import { isTerminal, TaskLimits, type EndReason } from "../../protocol/agents/task.js";
import type { CreatedSession, Session, StepRequest, StepResponse, VerifyResponse } from "../../protocol/envs/api.js";
import type { EnvRunNamespace } from "../../protocol/envs/run.js";
import type { RolloutAgent } from "../../protocol/envs/rollouts.js";
import type { CaptureBindings } from "./capture.js";
import { recordTurn, runRecordedCalls, type LoopHost } from "./loop.js";
import { TaskNotReady } from "./result.js";
import { SandboxUnavailable } from "./sandbox-client.js";
import { supplyArchive } from "./task-archive-source.js";
import { importDataKey, seal, unseal } from "./seal.js";
import type { Sampling, TaskState } from "./store.js";
import { budgetStop, SYSTEM_PROMPT, type ChatMessage, type ModelToolCall } from "./turn.js";

export interface CreateEnvTask {
  kind: "env" | "rollout";
  id: string;
  orgId: string;
  userId: string;
  keyId: string;
  taskSetId: string;
  taskIndex: number;
  /** The task's archive, which the sandbox host must hold (`PUT /v1/archives/{sha256}`). */
  sha256: string;
  /** Where the archive is published: fetched and sent to the host when it does not hold it. */
  archiveUrl?: string | undefined;
  seed?: number | undefined;
  limits: Partial<TaskLimits>;
  /** A session: seconds without a request before it ends itself (600 when absent). */
  idleSeconds?: number | undefined;
  /** A rollout: the model its loop calls, with the run's sampling. A session's is its client's, named `client`. */
  model?: string | undefined;
  sampling?: Sampling | undefined;
  parent?: { runId: string; member: number } | undefined;
  /** A rollout: what plays it (`model` when absent; `oracle` and `noop` call no model, `no-model.ts`). */
  agent?: RolloutAgent | undefined;
}

export interface SessionHost extends LoopHost {
  storage: DurableObjectStorage;
  setKey(key: CryptoKey): void;
  tenant(orgId: string): Promise<string>;
  runs(): EnvRunNamespace | undefined;
  /** Origins an archive URL may name though not public (`ALLOW_PRIVATE_ARCHIVE_ORIGINS`). */
  archiveOrigins(): readonly string[];
  /** Where a rollout's captured rows go (absent where the lake is not deployed). */
  lake(): CaptureBindings | undefined;
}

const DEFAULT_IDLE_SECONDS = 600;
/** How long the sandbox host keeps a session's sandbox past its idle time, should the object never come back. */
const HOST_IDLE_MARGIN_SECONDS = 600;

const NOT_RUN = JSON.stringify({
  error: { code: "not_run", message: "The session ended before this call ran." },
});

export class EnvTasks {
  /** The request running now: a session's requests run one at a time. */
  private chain: Promise<unknown> = Promise.resolve();
  private busy = 0;
  /** The create running now (`create`). */
  private creating: Promise<unknown> = Promise.resolve();

  constructor(private readonly host: SessionHost) {}

  /** `fn` after every request before it has settled, the session's idle clock reset before and after. */
  serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = async () => {
      this.busy++;
      try {
        await this.touch();
        return await fn();
      } finally {
        this.busy--;
        await this.touch();
      }
    };
    const next = this.chain.then(run, run);
    this.chain = next.catch(() => undefined);
    return next;
  }

  /** The session was just used: its idle end moves to `idleSeconds` from now. */
  private async touch(): Promise<void> {
    const state = this.host.store.state();
    if (state?.kind !== "env" || !state.env || state.env.destroyed) return;
    state.env.lastSeenAt = Date.now();
    this.host.store.saveState(state);
    await this.host.storage.setAlarm(state.env.lastSeenAt + state.env.idleSeconds * 1000);
  }

  private mustEnv(kind: "env" | "rollout" = "env"): TaskState & { env: NonNullable<TaskState["env"]> } {
    const state = this.host.mustState();
    if (state.kind !== kind || !state.env) throw new TaskNotReady("No such session.", true);
    return state as TaskState & { env: NonNullable<TaskState["env"]> };
  }

  /**
   * Makes the task and its sandbox, one create at a time: a second create that met no state while
   * the first waits on the host would take the first's new sandbox for one a lost create left.
   */
  create(input: CreateEnvTask): Promise<{ state: TaskState; instruction: string }> {
    const next = this.creating.then(
      () => this.createNow(input),
      () => this.createNow(input),
    );
    this.creating = next.catch(() => undefined);
    return next;
  }

  private async createNow(input: CreateEnvTask): Promise<{ state: TaskState; instruction: string }> {
    const existing = this.host.store.state();
    if (existing) {
      // A rollout that has reported destroys its sandbox (or is destroying it): the run needs only its state.
      if (existing.kind === "rollout" && existing.env?.reported) return { state: existing, instruction: "" };
      const info = await this.host.sandbox(existing.id).info();
      return { state: existing, instruction: info.task?.instruction ?? "" };
    }
    const limits = TaskLimits.parse(input.limits);
    const idleSeconds = input.idleSeconds ?? DEFAULT_IDLE_SECONDS;
    const sandbox = this.host.sandbox(input.id);
    const request = {
      limits: SandboxLimits.parse({ cpuSeconds: Math.min(3600, limits.sandboxSeconds) }),
      idleTtlSeconds: Math.min(
        86_400,
        input.kind === "env" ? idleSeconds + HOST_IDLE_MARGIN_SECONDS : limits.wallSeconds + 3600,
      ),
      tenant: await this.host.tenant(input.orgId),
      task: { archive: input.sha256 },
    };
    const lacksArchive = (err: unknown) => err instanceof SandboxUnavailable && err.status === 404;
    let info;
    try {
      info = await sandbox.createAfresh(request).catch(async (err: unknown) => {
        if (!lacksArchive(err) || !input.archiveUrl) throw err;
        // The host lacks the archive and the set says where it is published: it is fetched, checked and sent.
        await supplyArchive(sandbox, input.sha256, input.archiveUrl, this.host.archiveOrigins());
        return sandbox.createAfresh(request);
      });
    } catch (err) {
      if (lacksArchive(err))
        throw new TaskNotReady(
          `The sandbox host does not hold archive ${input.sha256}: send it with PUT /v1/envs/archives/${input.sha256}, then try again.`,
        );
      throw err;
    }
    if (!info.task) {
      await sandbox.destroy().catch(() => undefined);
      throw new SandboxUnavailable("The sandbox host does not run tasks from archives.", 501);
    }
    // The task's own agent timeout is its wall time, unless the caller set one.
    if (input.limits.wallSeconds === undefined && info.task.agentTimeoutSec)
      limits.wallSeconds = Math.min(86_400, Math.max(5, Math.ceil(info.task.agentTimeoutSec)));
    const key = await importDataKey(info.dataKey);
    this.host.setKey(key);
    const now = new Date();
    const state: TaskState = {
      id: input.id,
      orgId: input.orgId,
      userId: input.userId,
      keyId: input.keyId,
      model: input.model ?? "client",
      status: "running",
      limits,
      usage: {
        turns: 0,
        tokens: 0,
        promptTokens: 0,
        completionTokens: 0,
        toolCalls: 0,
        sandboxSeconds: 0,
        outputBytes: 0,
      },
      endReason: null,
      createdAt: now.toISOString(),
      startedAt: now.toISOString(),
      endedAt: null,
      retries: 0,
      kind: input.kind,
      env: {
        taskSetId: input.taskSetId,
        taskIndex: input.taskIndex,
        sha256: input.sha256,
        ...(input.seed !== undefined ? { seed: input.seed } : {}),
        idleSeconds,
        lastSeenAt: now.getTime(),
        ...(input.sampling ? { sampling: input.sampling } : {}),
        ...(input.parent ? { parent: input.parent } : {}),
        ...(input.kind === "rollout" && input.agent && input.agent !== "model" ? { agent: input.agent } : {}),
      },
    };
    const first = await seal(key, { role: "user", content: info.task.instruction } satisfies ChatMessage);
    const created = await seal(key, { kind: input.kind, model: state.model, limits });
    const started = await seal(key, { files: info.files, bytes: info.bytes });
    this.host.storage.transactionSync(() => {
      this.host.store.saveState(state);
      this.host.store.appendMessage(first);
      this.host.store.appendEvent("task.created", state.createdAt, created);
      this.host.store.appendEvent("task.started", state.createdAt, started);
    });
    // A rollout's loop starts now; a session waits for its steps, and ends itself when idle.
    await this.host.storage.setAlarm(input.kind === "rollout" ? Date.now() : Date.now() + idleSeconds * 1000);
    this.host.notify();
    return { state, instruction: info.task.instruction };
  }

  /** The session as its API shows it, with its tools and first observation. */
  created(state: TaskState, instruction: string): CreatedSession {
    return {
      ...this.view(state),
      tools: openAiTools({ searchable: false }),
      observation: {
        messages: [
          { role: "system", content: SYSTEM_PROMPT },
          { role: "user", content: instruction },
        ],
      },
    };
  }

  view(state: TaskState): Session {
    const env = state.env!;
    const { tokens: _tokens, ...limits } = state.limits;
    const { tokens: _used, promptTokens: _prompt, completionTokens: _completion, ...usage } = state.usage;
    return {
      id: state.id,
      status: state.status === "uploading" ? "running" : state.status,
      done: isTerminal(state.status) || env.reward !== undefined,
      reason: state.endReason,
      taskset: env.taskSetId,
      task: { index: env.taskIndex, sha256: env.sha256 },
      steps: state.usage.turns,
      limits: { ...limits, idleSeconds: env.idleSeconds },
      usage,
      reward: env.reward ?? null,
      components: env.components ?? null,
      createdAt: state.createdAt,
      endedAt: state.endedAt,
    };
  }

  get(): Session {
    return this.view(this.mustEnv());
  }

  private async key(state: TaskState): Promise<CryptoKey> {
    if (state.env?.destroyed) throw new TaskNotReady("The session has ended and its sandbox is gone.");
    const key = await this.host.dataKey(state);
    if (!key) throw new TaskNotReady("The session's sandbox is gone.");
    return key;
  }

  async step(request: StepRequest): Promise<StepResponse> {
    let state = this.mustEnv();
    const key = await this.key(state);
    // A step cut short (an eviction, a crash) left calls pending: they run (once) before anything else.
    await this.finishPending(key);
    state = this.mustEnv();
    const next = state.usage.turns + 1;
    if (request.index < next) return this.answer(key, request.index);
    if (request.index > next) throw new TaskNotReady(`Step ${request.index} is not next: step ${next} is.`);
    if (state.env.reward !== undefined) throw new TaskNotReady("The session has been verified: no step runs after it.");
    if (isTerminal(state.status)) throw new TaskNotReady(`The session is done (${state.endReason}).`);
    const stop = budgetStop(state, Date.now(), state.usage.sandboxSeconds, null);
    if (stop) {
      await this.host.end(state, stop, { message: `The session's ${stop.replace("_", " ")} budget is spent.` });
      throw new TaskNotReady(`The session is done (${stop}).`);
    }
    const toolCalls: ModelToolCall[] = (request.tool_calls ?? []).map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.function.name, arguments: c.function.arguments },
    }));
    await recordTurn(this.host, state, key, next, new Date().toISOString(), {
      content: request.content ?? null,
      toolCalls,
      tokens: 0,
      promptTokens: 0,
      completionTokens: 0,
    });
    if (toolCalls.length === 0) {
      // As in the production loop, an answer without calls ends the task.
      await this.host.end(this.mustEnv(), "finished", { summary: request.content ?? "" });
      return this.answer(key, next);
    }
    await this.finishPending(key);
    return this.answer(key, next);
  }

  /** Runs the recorded calls still pending, then ends the session if `finish` was called or a budget is spent. */
  private async finishPending(key: CryptoKey): Promise<void> {
    // As in the production loop, nothing runs after the end (a deletion, the wall time).
    if (this.host.store.pendingCalls().length === 0 || this.host.mustState().status !== "running") return;
    const { finishSummary } = await runRecordedCalls(this.host, key);
    const state = this.mustEnv();
    if (state.status !== "running") return;
    if (finishSummary !== undefined) {
      await this.host.end(state, "finished", { summary: finishSummary });
      return;
    }
    const stop = budgetStop(state, Date.now(), state.usage.sandboxSeconds, null);
    if (stop) await this.host.end(state, stop, { message: `The session's ${stop.replace("_", " ")} budget is spent.` });
  }

  /** Step `index`'s tool messages as they were recorded. */
  private async answer(key: CryptoKey, index: number): Promise<StepResponse> {
    const rows = this.host.store.turnResults(index);
    const results = await Promise.all(
      rows.map(async (row) => {
        if (row.result) return unseal<{ role: "tool"; tool_call_id: string; content: string }>(key, row.result);
        const call = await unseal<{ callId: string }>(key, row.call);
        return { role: "tool" as const, tool_call_id: call.callId, content: NOT_RUN };
      }),
    );
    const state = this.mustEnv();
    const { tokens: _tokens, promptTokens: _prompt, completionTokens: _completion, ...usage } = state.usage;
    return {
      index,
      results,
      done: isTerminal(state.status) || state.env.reward !== undefined,
      reason: state.endReason,
      usage,
    };
  }

  async verify(): Promise<VerifyResponse> {
    const state = this.mustEnv();
    const key = await this.key(state);
    const recorded = this.host.store.verdict();
    if (recorded) return unseal<VerifyResponse>(key, recorded);
    await this.finishPending(key);
    const verdict = await this.verifyNow(this.mustEnv(), key);
    const after = this.mustEnv();
    if (!isTerminal(after.status)) await this.host.end(after, "verified", { reward: verdict.reward });
    return verdict;
  }

  /** Runs the task's tests once (the call id makes a repeat answer the record) and records the verdict. */
  async verifyNow(state: TaskState, key: CryptoKey): Promise<VerifyResponse> {
    const out = await this.host.sandbox(state.id).verify(`${state.id}.verify`);
    const verdict: VerifyResponse = { reward: out.reward, components: out.components, log: out.log };
    const sealed = await seal(key, verdict);
    this.host.storage.transactionSync(() => {
      const current = this.host.mustState();
      current.env!.reward = out.reward;
      current.env!.components = out.components;
      this.host.store.saveState(current);
      this.host.store.setVerdict(sealed);
    });
    this.host.notify();
    return verdict;
  }

  async diff() {
    const state = this.mustEnv();
    await this.key(state);
    return this.host.sandbox(state.id).diff();
  }

  /** Ends the session (if it has not ended) and destroys its sandbox. */
  async destroy(reason: EndReason = "cancelled"): Promise<void> {
    const state = this.mustEnv();
    if (state.env.destroyed) return;
    if (!isTerminal(state.status)) await this.host.end(state, reason, {});
    const sandbox = this.host.sandbox(state.id);
    await sandbox.stop().catch(() => undefined);
    await sandbox.destroy();
    const after = this.mustEnv();
    after.env.destroyed = true;
    this.host.store.saveState(after);
    await this.host.storage.deleteAlarm();
    this.host.notify();
  }

  /** A session's alarm: it ends itself once idle (a request in flight is not idleness). */
  async alarm(state: TaskState): Promise<void> {
    const env = state.env!;
    if (env.destroyed) return;
    const due = env.lastSeenAt + env.idleSeconds * 1000;
    if (this.busy > 0 || Date.now() < due) {
      await this.host.storage.setAlarm(Math.max(Date.now() + 1000, due));
      return;
    }
    await this.destroy("idle");
  }
}
