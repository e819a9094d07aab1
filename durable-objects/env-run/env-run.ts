/**
 * One rollout run: a Durable Object that plays each of its tasks `groupSize` times, each play (a
 * member) an AgentTask of kind `rollout` running the production loop with the run's model and
 * sampling. It keeps at most `concurrency` members in flight (and each takes a slot and its sandbox
 * seconds of the org's agent quota, so a run is held to the org's plan like any agent task), hears
 * each member's end from the member itself (`rolloutEnded`, at least once, idempotent), computes a
 * task's group-relative advantages once its whole group has ended, and logs every step for its
 * resumable stream. Everything is in SQLite: a run evicted at any point carries on from storage,
 * and a member is made under an id derived from the run's, so making it again finds the same one.
 */
import { DurableObject } from "cloudflare:workers";
import type { AgentQuota } from "../agent-quota.js";
import type { AgentTask } from "../agent-task/agent-task.js";
import { isTerminal, TaskLimits } from "../../protocol/agents/task.js";
import type { EnvRunCallback, RolloutEnded as MemberReport } from "../../protocol/envs/run.js";
import {
  memberSeed,
  type RolloutEnded,
  type RolloutEvent,
  type RolloutRun,
  type RunSummary,
} from "../../protocol/envs/rollouts.js";
import type { LakeMessage } from "../../protocol/lake.js";
import { RunCapture } from "./capture.js";
import { EvalRows, type EvalAttempts } from "./eval-rows.js";
import { groupEnded, rolloutIdOf, runSummary, runView, started, unplayed } from "./report.js";
import { RunStore, type MemberRow, type RunState } from "./store.js";

export { rolloutIdOf };

interface EnvRunEnv {
  AGENT_TASK: DurableObjectNamespace<AgentTask>;
  AGENT_QUOTA: DurableObjectNamespace<AgentQuota>;
  /** The records queue, for each ended group's `rollouts` rows (absent where the lake is not deployed). */
  RECORDS?: Queue<LakeMessage>;
}

/** What a run is made with: its stored state less what the object sets (status, times). */
export type CreateRun = Omit<RunState, "status" | "createdAt" | "endedAt">;

export type RunResult<T> = { ok: true; value: T } | { ok: false; code: "not_found"; message: string };

/** Tries at making a member whose sandbox host is unreachable or busy, before the member ends unplayed. */
const MAX_START_TRIES = 6;
/** How often a run with members in flight looks at them, should a member's report never come. */
const SWEEP_MS = 5 * 60_000;
/** How long past its wall time a member may stay silent before the run reads its state itself. */
const REPORT_GRACE_MS = 30 * 60_000;
/** How soon a refused send of a group's `rollouts` rows is made again. */
const CAPTURE_RETRY_MS = 30_000;
/** Seconds a quota reservation outlives its member's wall time, as for an agent task. */
const RESERVATION_GRACE_SECONDS = 3600;

export class EnvRun extends DurableObject<EnvRunEnv> implements EnvRunCallback {
  private readonly store: RunStore;
  private readonly capture: RunCapture;
  private readonly evals: EvalRows;
  private readonly listeners = new Set<() => void>();
  /** Members being made by this instance now (an alarm's starts run concurrently with reports). */
  private readonly starting = new Set<number>();

  constructor(ctx: DurableObjectState, env: EnvRunEnv) {
    super(ctx, env);
    this.store = new RunStore(ctx.storage.sql);
    this.capture = new RunCapture(ctx.storage.sql);
    this.evals = new EvalRows(ctx.storage.sql);
  }

  async create(input: CreateRun): Promise<RolloutRun> {
    const existing = this.store.state();
    if (existing) return this.view(existing);
    const state: RunState = { ...input, status: "running", createdAt: new Date().toISOString(), endedAt: null };
    this.ctx.storage.transactionSync(() => {
      this.store.saveState(state);
      let member = 0;
      input.tasks.forEach((_, grp) => {
        for (let gi = 0; gi < input.groupSize; gi++)
          this.store.addMember(member++, grp, gi, memberSeed(input.sampling, gi));
      });
    });
    await this.ctx.storage.setAlarm(Date.now());
    return this.view(state);
  }

  /** The run, for its org only: another org's run is a missing one. */
  async get(orgId: string): Promise<RunResult<RolloutRun>> {
    const state = this.store.state();
    if (!state || state.orgId !== orgId) return { ok: false, code: "not_found", message: "No such rollout run." };
    return { ok: true, value: this.view(state) };
  }

  /** An eval run's ended attempts with their prompt and completion tokens, for its org only. */
  async evalAttempts(orgId: string): Promise<RunResult<EvalAttempts>> {
    const state = this.store.state();
    if (!state || state.orgId !== orgId) return { ok: false, code: "not_found", message: "No such rollout run." };
    return {
      ok: true,
      value: {
        status: state.status,
        tasks: state.tasks,
        groupSize: state.groupSize,
        createdAt: state.createdAt,
        endedAt: state.endedAt,
        attempts: this.evals.ended(state),
      },
    };
  }

  async events(
    orgId: string,
    after: number,
    limit = 500,
  ): Promise<RunResult<{ events: RolloutEvent[]; ended: boolean }>> {
    const state = this.store.state();
    if (!state || state.orgId !== orgId) return { ok: false, code: "not_found", message: "No such rollout run." };
    const rows = this.store.eventsAfter(after, limit);
    const events = rows.map((r) => ({ id: r.id, type: r.type, at: r.at, data: JSON.parse(r.data) }) as RolloutEvent);
    return { ok: true, value: { events, ended: state.status === "ended" && rows.length < limit } };
  }

  /** Resolves when an event is appended (or after `ms`). */
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

  /** Drops this object's memory, as an eviction would; storage and a pending alarm survive. */
  restart(): void {
    this.ctx.abort("restarted by an operator");
  }

  /** A member's end, as the member tells it: recorded once, whatever the number of times it is told. */
  async rolloutEnded(ended: MemberReport): Promise<{ recorded: boolean }> {
    const state = this.store.state();
    const row = state && this.store.member(ended.member);
    if (!state || state.id !== ended.runId || !row || rolloutIdOf(state.id, row.member) !== ended.taskId)
      return { recorded: false };
    if (row.state === "ended") return { recorded: false };
    this.capture.keep(ended);
    if (state.eval) this.evals.keep(ended);
    this.recordEnd(state, row, {
      reward: ended.reward,
      components: ended.components,
      outcome: ended.outcome,
      verifyError: ended.verifyError ?? null,
      turns: ended.usage.turns,
      tokens: ended.usage.tokens,
      toolCalls: ended.usage.toolCalls,
      sandboxSeconds: ended.usage.sandboxSeconds,
      startedAt: ended.startedAt,
      endedAt: ended.endedAt,
    });
    // A slot is free: the next member starts now rather than at the next sweep. Set before the send,
    // the alarm also sends this member's rows should this instance go before it has.
    await this.ctx.storage.setAlarm(Date.now());
    await this.sendCaptured();
    return { recorded: true };
  }

  override async alarm(): Promise<void> {
    await this.sendCaptured();
    const state = this.store.state();
    if (!state || state.status !== "running") return;
    await this.sweep(state);
    let retryAt = await this.startMembers(state);
    // Groups the sweep or a failed start ended.
    await this.sendCaptured();
    if (this.store.state()!.status !== "running") return;
    // Members that ended unplayed left their slots free: the next ones start at once.
    const inFlight = this.store.count("running") + this.starting.size;
    if (retryAt === Number.POSITIVE_INFINITY && inFlight < state.concurrency && this.store.pending(1).length > 0)
      retryAt = Date.now();
    if (this.store.count("running") > 0) retryAt = Math.min(retryAt, Date.now() + SWEEP_MS);
    if (Number.isFinite(retryAt)) await this.ctx.storage.setAlarm(retryAt);
  }

  /** Makes members up to the run's concurrency; answers when to try again (Infinity: no need). */
  private async startMembers(state: RunState): Promise<number> {
    const free = state.concurrency - this.store.count("running") - this.starting.size;
    if (free <= 0) return Number.POSITIVE_INFINITY;
    const batch = this.store.pending(free + this.starting.size).filter((m) => !this.starting.has(m.member));
    const limits = TaskLimits.parse(state.limits);
    const quota = this.env.AGENT_QUOTA.get(this.env.AGENT_QUOTA.idFromName(state.orgId));
    let retryAt = Number.POSITIVE_INFINITY;
    const starts: Promise<void>[] = [];
    for (const member of batch.slice(0, free)) {
      const rolloutId = rolloutIdOf(state.id, member.member);
      const expiresAt = Date.now() + (limits.wallSeconds + RESERVATION_GRACE_SECONDS) * 1000;
      const reserved = await quota.reserve(rolloutId, limits.sandboxSeconds, expiresAt, state.orgLimits);
      if (!reserved.ok) {
        if (reserved.limit === "agent-sandbox-seconds") {
          // Not before tomorrow: the run ends with what it has rather than hold its stream a day.
          for (const m of this.store.pending(Number.MAX_SAFE_INTEGER))
            if (!this.starting.has(m.member)) this.recordEnd(state, m, unplayed("quota", reserved.message));
        } else retryAt = Date.now() + Math.min(reserved.retryAfterSeconds, 30) * 1000;
        break;
      }
      this.starting.add(member.member);
      starts.push(
        this.startMember(state, member, rolloutId).then(
          (again) => {
            if (again !== null) retryAt = Math.min(retryAt, again);
          },
          () => {},
        ),
      );
    }
    await Promise.all(starts);
    return retryAt;
  }

  /** Makes one member's AgentTask; answers when to try again if the host could not take it now. */
  private async startMember(state: RunState, member: MemberRow, rolloutId: string): Promise<number | null> {
    const task = state.tasks[member.grp]!;
    const quota = this.env.AGENT_QUOTA.get(this.env.AGENT_QUOTA.idFromName(state.orgId));
    try {
      let failure: { code: string; message: string } | null = null;
      try {
        const result = await this.env.AGENT_TASK.get(this.env.AGENT_TASK.idFromName(rolloutId)).create({
          kind: "rollout",
          id: rolloutId,
          orgId: state.orgId,
          userId: state.userId,
          keyId: state.keyId,
          taskSetId: state.taskset,
          taskIndex: task.index,
          sha256: task.sha256,
          archiveUrl: state.archiveUrls?.[member.grp] ?? undefined,
          seed: member.seed,
          limits: state.limits,
          model: state.policy.model,
          sampling: { ...state.sampling, seed: member.seed },
          parent: { runId: state.id, member: member.member },
          agent: state.agent,
        });
        if (!result.ok) failure = { code: result.code, message: result.message };
      } catch (err) {
        failure = { code: "unavailable", message: (err as Error).message };
      }
      if (!failure) {
        this.ctx.storage.transactionSync(() => {
          if (this.store.launched(member.member, Date.now())) this.announce(state, this.store.member(member.member)!);
        });
        this.notify();
        return null;
      }
      if (failure.code === "unavailable" && this.store.tried(member.member) < MAX_START_TRIES) {
        await quota.settle(rolloutId, 0);
        return Date.now() + 1000 * 2 ** this.store.member(member.member)!.tries;
      }
      await quota.settle(rolloutId, 0);
      const current = this.store.member(member.member)!;
      if (current.state !== "ended") this.recordEnd(state, current, unplayed("start_error", failure.message));
      return null;
    } finally {
      this.starting.delete(member.member);
    }
  }

  /**
   * Members silent long past their wall time: their own report should have come; the run reads
   * the member's state and records its end without a reward if it has ended.
   */
  private async sweep(state: RunState): Promise<void> {
    const wallMs = TaskLimits.parse(state.limits).wallSeconds * 1000;
    const late = this.store
      .running()
      .filter((m) => m.launched_at !== null && Date.now() - m.launched_at > wallMs + REPORT_GRACE_MS);
    for (const m of late) {
      const rolloutId = rolloutIdOf(state.id, m.member);
      const result = await this.env.AGENT_TASK.get(this.env.AGENT_TASK.idFromName(rolloutId)).get();
      const current = this.store.member(m.member)!;
      if (current.state === "ended") continue;
      if (!result.ok) this.recordEnd(state, current, unplayed("start_error", result.message));
      else if (isTerminal(result.value.status))
        this.recordEnd(state, current, {
          ...unplayed(result.value.endReason ?? "failed", "The rollout did not report its reward to its run."),
          turns: result.value.usage.turns,
          tokens: result.value.usage.tokens,
          toolCalls: result.value.usage.toolCalls,
          sandboxSeconds: result.value.usage.sandboxSeconds,
          startedAt: result.value.startedAt,
          endedAt: result.value.endedAt,
        });
    }
  }

  /** Sends the `rollouts` rows of groups that have ended; a refused send is tried again by the alarm. */
  private async sendCaptured(): Promise<void> {
    const state = this.store.state();
    if (!state || !this.env.RECORDS) return;
    try {
      await this.capture.send(state, this.env.RECORDS);
      await this.evals.send(state, this.env.RECORDS, (member) => this.capture.verifierLog(member));
    } catch (err) {
      console.error(
        JSON.stringify({ level: "warn", message: "rollout rows not sent", run: state.id, error: String(err) }),
      );
      const next = Date.now() + CAPTURE_RETRY_MS;
      const alarm = await this.ctx.storage.getAlarm();
      if (alarm === null || alarm > next) await this.ctx.storage.setAlarm(next);
    }
  }

  private announce(state: RunState, m: MemberRow): void {
    this.store.announce(m.member);
    this.store.appendEvent("rollout.started", new Date().toISOString(), started(state, m));
  }

  /** A member's end, its group's advantages if it was the group's last, and the run's summary if the run's. */
  private recordEnd(state: RunState, row: MemberRow, end: Parameters<RunStore["ended"]>[1]): void {
    this.ctx.storage.transactionSync(() => {
      const at = new Date().toISOString();
      if (!row.announced) this.announce(state, row);
      this.store.ended(row.member, end);
      const data: RolloutEnded = {
        ...started(state, row),
        reward: end.reward,
        components: end.components,
        outcome: end.outcome,
        ...(end.verifyError ? { verifyError: end.verifyError } : {}),
        turns: end.turns,
        tokens: end.tokens,
        toolCalls: end.toolCalls,
        sandboxSeconds: end.sandboxSeconds,
        startedAt: end.startedAt,
        endedAt: end.endedAt,
        durationMs: end.startedAt && end.endedAt ? Date.parse(end.endedAt) - Date.parse(end.startedAt) : null,
      };
      this.store.appendEvent("rollout.ended", at, data);
      const group = this.store.group(row.grp);
      if (group.every((m) => m.state === "ended")) {
        const ended = groupEnded(state, row.grp, group);
        ended.advantages.forEach((a, i) => this.store.setAdvantage(ended.members[i]!, a));
        this.store.appendEvent("group.ended", at, ended);
      }
      if (this.store.count("ended") === state.groupSize * state.tasks.length) {
        const summary = runSummary(state, this.store.members(), Date.now());
        this.store.appendEvent("summary", at, summary);
        state.status = "ended";
        state.endedAt = at;
        this.store.saveState(state);
        if (state.eval) this.evals.sendAgain();
      }
    });
    this.notify();
  }

  private notify(): void {
    for (const listener of this.listeners) listener();
  }

  private view(state: RunState): RolloutRun {
    const last = this.store.eventsAfter(Math.max(0, this.store.lastEventId() - 1), 1)[0];
    const summary = state.status === "ended" && last?.type === "summary" ? (JSON.parse(last.data) as RunSummary) : null;
    return runView(state, this.store.members(), summary, this.store.lastEventId());
  }
}
