/**
 * One coding-agent task: a Durable Object that runs the agent's loop (call the model through the
 * edge's gateway, run the tool calls it asks for in the task's sandbox, repeat) one turn per alarm,
 * and appends every step to an event log in its SQLite storage. A turn's model answer and its calls
 * are recorded before any call runs, and each call carries an id the sandbox host runs only once, so
 * a task evicted or crashed at any point resumes from its storage without a write or a command
 * running twice. Nothing it stores holds code in the clear: payloads are sealed with a key only the
 * sandbox host holds (`seal.ts`). The same object runs a task-set task as an environment session or
 * a rollout (`session.ts`).
 */
import { DurableObject } from "cloudflare:workers";
import type { AgentQuota } from "../agent-quota.js";
import type { AgentModelGateway } from "../../protocol/agents/gateway.js";
import { SandboxLimits } from "../../protocol/agents/sandbox.js";
import {
  isTerminal,
  TaskLimits,
  type EndReason,
  type EventType,
  type Task,
  type TaskEvent,
  type UploadTaskFilesRequest,
} from "../../protocol/agents/task.js";
import { importDataKey, seal, unseal } from "./seal.js";
import { SandboxClient, SandboxUnavailable, sandboxHost, tenantTag, type SandboxSettings } from "./sandbox-client.js";
import { allowedArchiveOrigins, ArchiveError, importArchive, UNUSABLE_ARCHIVE, type ArchiveReport } from "./archive.js";
import { RetryLater, runTurn, type LoopHost } from "./loop.js";
import { playWithoutModel } from "./no-model.js";
import { guarded, TaskNotReady } from "./result.js";
import { reportRollout } from "./rollout.js";
import { EnvTasks, type CreateEnvTask, type SessionHost } from "./session.js";
import { cancelTask, followUp } from "./steer.js";
import { TaskStore, type CreateTask, type TaskState } from "./store.js";
import type { ChatMessage } from "./turn.js";
import type { StepRequest } from "../../protocol/envs/api.js";
import type { EnvRunNamespace } from "../../protocol/envs/run.js";
import type { LakeMessage } from "../../protocol/lake.js";

export type { CreateTask };

interface AgentTaskEnv extends SandboxSettings {
  AGENT_GATEWAY: AgentModelGateway;
  AGENT_QUOTA: DurableObjectNamespace<AgentQuota>;
  ALLOW_PRIVATE_ARCHIVE_ORIGINS?: string;
  /** The rollout runs' objects, which a rollout tells of its end (absent where no runs are deployed). */
  ENV_RUN?: EnvRunNamespace;
  /** The org's sealing keys and the records queue, for a rollout's capture (`capture.ts`). */
  DB?: D1Database;
  RECORDS?: Queue<LakeMessage>;
}

/** Failures of the model or the sandbox host in a row before the task ends. */
const MAX_RETRIES = 8;
/** Attempts at fetching a task's archive (a network failure, a 5xx) before the task ends. */
const MAX_ARCHIVE_TRIES = 3;
/** Seconds an ended task's sandbox (and so its diff and readable events) outlives it without use. */
const SANDBOX_IDLE_TTL_SECONDS = 3600;

export class AgentTask extends DurableObject<AgentTaskEnv> {
  private readonly store: TaskStore;
  private key: CryptoKey | undefined;
  private readonly listeners = new Set<() => void>();
  private readonly host: LoopHost;
  private readonly envTasks: EnvTasks;
  private readonly envHost: SessionHost;
  /** The conversation as far as this instance has unsealed it: messages are only ever appended. */
  private readonly unsealed: ChatMessage[] = [];

  constructor(ctx: DurableObjectState, env: AgentTaskEnv) {
    super(ctx, env);
    this.store = new TaskStore(ctx.storage.sql);
    this.host = {
      store: this.store,
      storage: ctx.storage,
      gateway: env.AGENT_GATEWAY,
      sandbox: (id) => this.sandbox(id),
      dataKey: (state) => this.dataKey(state),
      event: (type, data) => this.event(type, data),
      end: (state, reason, data) => this.end(state, reason, data),
      notify: () => this.notify(),
      mustState: () => this.mustState(),
      conversation: (key) => this.conversation(key),
    };
    this.envHost = {
      ...this.host,
      setKey: (key) => (this.key = key),
      tenant: tenantTag,
      runs: () => env.ENV_RUN,
      archiveOrigins: () => allowedArchiveOrigins(env),
      lake: () => (env.DB && env.RECORDS ? { db: env.DB, records: env.RECORDS } : undefined),
    };
    this.envTasks = new EnvTasks(this.envHost);
  }

  private sandbox(id: string): SandboxClient {
    const host = sandboxHost(this.env, id);
    if (typeof host === "string") throw new SandboxUnavailable(host, null);
    return new SandboxClient(host, id);
  }

  /** The task's data key, from its sandbox host; undefined once the sandbox is gone. */
  private async dataKey(state: TaskState): Promise<CryptoKey | undefined> {
    if (this.key) return this.key;
    try {
      this.key = await importDataKey((await this.sandbox(state.id).info()).dataKey);
    } catch (err) {
      if (err instanceof SandboxUnavailable && err.status === 404) return undefined;
      throw err;
    }
    return this.key;
  }

  private async event(type: EventType, data: Record<string, unknown>): Promise<void> {
    const sealed = this.key ? await seal(this.key, data) : null;
    this.store.appendEvent(type, new Date().toISOString(), sealed);
  }

  /** Only a turn reads it, and turns run one at a time (one alarm at a time). */
  private async conversation(key: CryptoKey): Promise<ChatMessage[]> {
    const fresh = this.store.messages(this.unsealed.length);
    this.unsealed.push(...(await Promise.all(fresh.map((m) => unseal<ChatMessage>(key, m)))));
    return [...this.unsealed];
  }

  private notify(): void {
    for (const listener of this.listeners) listener();
  }

  private mustState(): TaskState {
    const state = this.store.state();
    if (!state) throw new TaskNotReady("No such task.", true);
    return state;
  }

  private async createTask(input: CreateTask): Promise<Task> {
    const existing = this.store.state();
    if (existing) return this.view(existing);
    const limits = TaskLimits.parse(input.limits);
    const info = await this.sandbox(input.id).create({
      limits: SandboxLimits.parse({ cpuSeconds: Math.min(3600, limits.sandboxSeconds) }),
      idleTtlSeconds: Math.min(86_400, Math.max(SANDBOX_IDLE_TTL_SECONDS, limits.wallSeconds + 600)),
      ...(input.workspace ? { workspace: input.workspace } : {}),
      tenant: await tenantTag(input.orgId),
    });
    this.key = await importDataKey(info.dataKey);
    const now = new Date().toISOString();
    const state: TaskState = {
      id: input.id,
      orgId: input.orgId,
      userId: input.userId,
      keyId: input.keyId,
      model: input.model,
      status: "uploading",
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
      createdAt: now,
      startedAt: null,
      endedAt: null,
      retries: 0,
      ...(input.workspace ? { workspaceId: input.workspace.id } : {}),
    };
    const firstMessage = await seal(this.key, { role: "user", content: input.prompt } satisfies ChatMessage);
    const created = await seal(this.key, { prompt: input.prompt, model: input.model, limits });
    const source = input.archiveUrl ? await seal(this.key, { archiveUrl: input.archiveUrl }) : null;
    this.ctx.storage.transactionSync(() => {
      this.store.saveState(state);
      this.store.appendMessage(firstMessage);
      this.store.appendEvent("task.created", now, created);
      this.store.setSource(source);
    });
    // An archive is fetched by the alarm, not in this request: it can be large.
    if (source) await this.ctx.storage.setAlarm(Date.now());
    return input.waitForUpload || source ? this.view(state) : this.startTask();
  }

  /** The task's archive into its sandbox, then the start; an archive that cannot be used ends the task. */
  private async importSource(state: TaskState, sealed: ArrayBuffer): Promise<void> {
    const key = await this.dataKey(state);
    if (!key) throw new SandboxUnavailable("The task's sandbox is gone.", 404);
    const { archiveUrl } = await unseal<{ archiveUrl: string }>(key, sealed);
    const sandbox = this.sandbox(state.id);
    try {
      const report = await importArchive(archiveUrl, (files) => sandbox.upload(files), allowedArchiveOrigins(this.env));
      this.store.setSource(null);
      await this.startTask(report);
    } catch (err) {
      if (!(err instanceof ArchiveError) && !(err instanceof SandboxUnavailable && err.status === 507)) throw err;
      await this.end(state, "source_error", { message: err.message });
    }
  }

  private async uploadFiles(files: UploadTaskFilesRequest["files"]): Promise<{ files: number; bytes: number }> {
    const state = this.mustState();
    if (state.status !== "uploading")
      throw new TaskNotReady(`The task is ${state.status}: files go in before it starts.`);
    if (this.store.source()) throw new TaskNotReady("The task's files come from its archive.");
    return this.sandbox(state.id).upload(files.map((f) => ({ ...f, executable: f.executable ?? false })));
  }

  private async startTask(archive?: ArchiveReport): Promise<Task> {
    const state = this.mustState();
    if (state.status !== "uploading") return this.view(state);
    if (!archive && this.store.source()) throw new TaskNotReady("The task starts by itself once its archive is in.");
    await this.dataKey(state);
    const info = await this.sandbox(state.id).info();
    state.status = "running";
    state.startedAt = new Date().toISOString();
    this.store.saveState(state);
    await this.event("task.started", {
      files: info.files,
      bytes: info.bytes,
      ...(archive ? { skipped: archive.skipped, skippedEntries: archive.skippedEntries } : {}),
    });
    await this.ctx.storage.setAlarm(Date.now());
    this.notify();
    return this.view(state);
  }

  /** An agent task, or (`kind: "rollout"`) the production loop on a task-set task for a run. */
  create(input: CreateTask | (CreateEnvTask & { kind: "rollout" })) {
    return guarded(async () => {
      if (!("kind" in input)) return this.createTask(input);
      const { state } = await this.envTasks.create(input);
      return this.view(state);
    });
  }
  /** An environment session: the task's sandbox, its tools and first observation; its turns come from `step`. */
  openSession(input: CreateEnvTask & { kind: "env" }) {
    return guarded(async () => {
      const { state, instruction } = await this.envTasks.create(input);
      return this.envTasks.created(state, instruction);
    });
  }
  session() {
    return guarded(() => this.envTasks.serial(async () => this.envTasks.get()));
  }
  step(request: StepRequest) {
    return guarded(() => this.envTasks.serial(() => this.envTasks.step(request)));
  }
  verify() {
    return guarded(() => this.envTasks.serial(() => this.envTasks.verify()));
  }
  sessionDiff() {
    return guarded(() => this.envTasks.serial(() => this.envTasks.diff()));
  }
  /** Ends the session at once (a step in flight included) and destroys its sandbox. */
  closeSession() {
    return guarded(() => this.envTasks.destroy());
  }
  upload(files: UploadTaskFilesRequest["files"]) {
    return guarded(() => this.uploadFiles(files));
  }
  start() {
    return guarded(() => this.startTask());
  }
  get() {
    return guarded(async () => this.view(this.mustState()));
  }
  cancel() {
    return guarded(async () => {
      await cancelTask(this.host);
      return this.view(this.mustState());
    });
  }
  message(content: string) {
    return guarded(async () => {
      await followUp(this.host, content);
      return this.view(this.mustState());
    });
  }
  diff() {
    return guarded(() => this.taskDiff());
  }
  events(after: number, limit = 500) {
    return guarded(() => this.readEvents(after, limit));
  }

  private async taskDiff() {
    const state = this.mustState();
    return this.sandbox(state.id).diff();
  }

  /** Events after `after`, payloads unsealed (null once the sandbox is gone). */
  private async readEvents(after: number, limit: number): Promise<{ events: TaskEvent[]; ended: boolean }> {
    const state = this.mustState();
    const rows = this.store.eventsAfter(after, limit);
    const key = rows.some((r) => r.sealed) ? await this.dataKey(state).catch(() => undefined) : this.key;
    const events: TaskEvent[] = [];
    for (const row of rows) {
      let data: Record<string, unknown> | null = null;
      if (key && row.sealed) data = await unseal<Record<string, unknown>>(key, row.sealed).catch(() => null);
      events.push({ id: row.id, type: row.type, at: row.at, data });
    }
    return { events, ended: isTerminal(state.status) && rows.length < limit };
  }

  /**
   * Drops this object's memory (its data key, its listeners), as an eviction would: the next request
   * or alarm meets a new instance that carries on from storage. A pending alarm survives.
   */
  restart(): void {
    this.ctx.abort("restarted by an operator");
  }

  /** Resolves when an event is appended or the task changes (or after `ms`). */
  async waitForChange(ms: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.listeners.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.listeners.add(done);
    });
  }

  private view(state: TaskState): Task {
    return {
      id: state.id,
      status: state.status,
      model: state.model,
      limits: state.limits,
      usage: state.usage,
      endReason: state.endReason,
      createdAt: state.createdAt,
      startedAt: state.startedAt,
      endedAt: state.endedAt,
      workspaceId: state.workspaceId ?? null,
      lastEventId: this.store.lastEventId(),
    };
  }

  private async end(state: TaskState, reason: EndReason, data: Record<string, unknown>): Promise<void> {
    // The first end stands: a caller holding a copy read before a cancel (or another end) landed
    // must not overwrite it, nor record a second end.
    if (isTerminal(this.mustState().status)) return;
    const status =
      reason === "finished" || reason === "verified" ? "finished" : reason === "cancelled" ? "cancelled" : "failed";
    state.status = status;
    state.endReason = reason;
    state.endedAt = new Date().toISOString();
    this.store.saveState(state);
    await this.event("task.ended", { status, reason, ...data });
    await this.ctx.storage.deleteAlarm();
    this.notify();
    // The org's quota takes back what the task reserved and did not use; if this call is lost,
    // the reservation lapses at its expiry, counted in full.
    await this.env.AGENT_QUOTA.get(this.env.AGENT_QUOTA.idFromName(state.orgId))
      .settle(state.id, state.usage.sandboxSeconds)
      .catch(() => undefined);
    // A rollout is verified and reported by the alarm, which retries both.
    if (state.kind === "rollout") await this.ctx.storage.setAlarm(Date.now());
  }

  override async alarm(): Promise<void> {
    const state = this.store.state();
    if (state?.kind === "env") return this.envTasks.alarm(state);
    if (state?.kind === "rollout" && isTerminal(state.status)) return reportRollout(this.envHost, this.envTasks, state);
    const source = state?.status === "uploading" ? this.store.source() : undefined;
    if (!state || (state.status !== "running" && !source)) return;
    try {
      if (source) await this.importSource(state, source);
      else if (state.env?.agent) await playWithoutModel(this.host, state, state.env.agent);
      else await runTurn(this.host, state);
      state.retries = 0;
    } catch (err) {
      const current = this.store.state();
      if (!current || (current.status !== "running" && !source)) return;
      current.retries++;
      const tries = source ? MAX_ARCHIVE_TRIES : MAX_RETRIES;
      if (current.retries >= tries || (err instanceof SandboxUnavailable && err.status === 404)) {
        const reason =
          err instanceof SandboxUnavailable
            ? err.status === 404
              ? "sandbox_gone"
              : "sandbox_error"
            : source
              ? "source_error"
              : "model_error";
        // How an archive's fetch failed (refused, broken off, timed out) is not told: see archive.ts.
        const message = reason === "source_error" ? UNUSABLE_ARCHIVE : (err as Error).message;
        await this.end(current, reason, { message });
        return;
      }
      this.store.saveState(current);
      const retryAfter = err instanceof RetryLater ? err.seconds : 2 ** Math.min(current.retries, 5);
      // Never past the wall-time deadline: the task must end on time even while it waits to retry.
      const deadline = current.startedAt
        ? Date.parse(current.startedAt) + current.limits.wallSeconds * 1000
        : Number.POSITIVE_INFINITY;
      await this.ctx.storage.setAlarm(Math.min(Date.now() + retryAfter * 1000, deadline));
    } finally {
      this.notify();
    }
  }
}
