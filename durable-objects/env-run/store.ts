/**
 * A rollout run's SQLite storage: the run's settings (one row), one row per member, and the event log
 * the run's streams are read from. It holds what a trainer needs to rebuild the run (task indexes and
 * archive hashes, seeds, rewards, advantages, outcomes, counts, times) and nothing of a task's content:
 * a task's instruction and files stay with the sandbox host, its conversation sealed in the rollout's
 * own object.
 */
import type { AgentOrgLimits, TaskLimits } from "../../protocol/agents/task.js";
import type { Policy, RolloutAgent, RolloutEventType, RunTask, Sampling } from "../../protocol/envs/rollouts.js";
import type { TokenPrice } from "../../protocol/evals/api.js";

/** What a rollout run that plays an eval run keeps of it, for the eval's `eval_attempts` rows. */
export interface EvalSettings {
  id: string;
  /** The model's price when the eval run was made (null: none known). */
  price: TokenPrice | null;
}

export interface RunState {
  id: string;
  orgId: string;
  userId: string;
  keyId: string;
  taskset: string;
  tasks: RunTask[];
  /**
   * Each task's published archive URL (null where none), fetched by a member whose host lacks it: a
   * public location, as the task set keeps it.
   */
  archiveUrls?: (string | null)[];
  policy: Policy;
  /** What plays each member: the policy's model (`model`, and when absent), or no model (`oracle`, `noop`). */
  agent?: RolloutAgent;
  groupSize: number;
  sampling: Sampling;
  limits: Partial<TaskLimits>;
  concurrency: number;
  /** The org's agent quota, which each member reserves a slot and its sandbox seconds of. */
  orgLimits: AgentOrgLimits;
  /** Set when the run plays an eval run: each member that ends then writes its `eval_attempts` row. */
  eval?: EvalSettings;
  status: "running" | "ended";
  createdAt: string;
  endedAt: string | null;
}

export type MemberState = "pending" | "running" | "ended";

export type MemberRow = {
  member: number;
  grp: number;
  gi: number;
  seed: number;
  state: MemberState;
  /** Whether `rollout.started` was logged (a fast rollout can report its end before its start is recorded). */
  announced: number;
  tries: number;
  reward: number | null;
  components: string | null;
  outcome: string | null;
  verify_error: string | null;
  advantage: number | null;
  turns: number | null;
  tokens: number | null;
  tool_calls: number | null;
  sandbox_seconds: number | null;
  started_at: string | null;
  ended_at: string | null;
  /** When the member was made (ms since the epoch): a member silent long past its wall time is looked at. */
  launched_at: number | null;
};

export type StoredRunEvent = {
  id: number;
  type: RolloutEventType;
  at: string;
  data: string;
};

export class RunStore {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS run (k INTEGER PRIMARY KEY CHECK (k = 1), state TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS members (
        member INTEGER PRIMARY KEY, grp INTEGER NOT NULL, gi INTEGER NOT NULL, seed INTEGER NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending', announced INTEGER NOT NULL DEFAULT 0, tries INTEGER NOT NULL DEFAULT 0,
        reward REAL, components TEXT, outcome TEXT, verify_error TEXT, advantage REAL, turns INTEGER,
        tokens INTEGER, tool_calls INTEGER, sandbox_seconds REAL, started_at TEXT, ended_at TEXT,
        launched_at INTEGER
      );
      CREATE INDEX IF NOT EXISTS members_state ON members (state, member);
      CREATE INDEX IF NOT EXISTS members_grp ON members (grp);
      CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, type TEXT NOT NULL, at TEXT NOT NULL, data TEXT NOT NULL
      );
    `);
  }

  state(): RunState | undefined {
    const row = this.sql.exec<{ state: string }>("SELECT state FROM run WHERE k = 1").toArray()[0];
    return row ? (JSON.parse(row.state) as RunState) : undefined;
  }

  saveState(state: RunState): void {
    this.sql.exec(
      "INSERT INTO run (k, state) VALUES (1, ?) ON CONFLICT (k) DO UPDATE SET state = excluded.state",
      JSON.stringify(state),
    );
  }

  addMember(member: number, grp: number, gi: number, seed: number): void {
    this.sql.exec("INSERT INTO members (member, grp, gi, seed) VALUES (?, ?, ?, ?)", member, grp, gi, seed);
  }

  member(member: number): MemberRow | undefined {
    return this.sql.exec<MemberRow>("SELECT * FROM members WHERE member = ?", member).toArray()[0];
  }

  members(): MemberRow[] {
    return this.sql.exec<MemberRow>("SELECT * FROM members ORDER BY member").toArray();
  }

  group(grp: number): MemberRow[] {
    return this.sql.exec<MemberRow>("SELECT * FROM members WHERE grp = ? ORDER BY gi", grp).toArray();
  }

  pending(limit: number): MemberRow[] {
    return this.sql
      .exec<MemberRow>("SELECT * FROM members WHERE state = 'pending' ORDER BY member LIMIT ?", limit)
      .toArray();
  }

  running(): MemberRow[] {
    return this.sql.exec<MemberRow>("SELECT * FROM members WHERE state = 'running' ORDER BY member").toArray();
  }

  count(state: MemberState): number {
    return this.sql.exec<{ n: number }>("SELECT count(*) AS n FROM members WHERE state = ?", state).one().n;
  }

  /** Marks a member made; false if it had already moved on (its end can arrive first). */
  launched(member: number, at: number): boolean {
    return (
      this.sql.exec(
        "UPDATE members SET state = 'running', launched_at = ? WHERE member = ? AND state = 'pending'",
        at,
        member,
      ).rowsWritten > 0
    );
  }

  announce(member: number): void {
    this.sql.exec("UPDATE members SET announced = 1 WHERE member = ?", member);
  }

  tried(member: number): number {
    this.sql.exec("UPDATE members SET tries = tries + 1 WHERE member = ?", member);
    return this.member(member)!.tries;
  }

  ended(
    member: number,
    end: {
      reward: number | null;
      components: Record<string, number>;
      outcome: string;
      verifyError: string | null;
      turns: number;
      tokens: number;
      toolCalls: number;
      sandboxSeconds: number;
      startedAt: string | null;
      endedAt: string | null;
    },
  ): void {
    this.sql.exec(
      `UPDATE members SET state = 'ended', reward = ?, components = ?, outcome = ?, verify_error = ?, turns = ?,
         tokens = ?, tool_calls = ?, sandbox_seconds = ?, started_at = ?, ended_at = ? WHERE member = ?`,
      end.reward,
      JSON.stringify(end.components),
      end.outcome,
      end.verifyError,
      end.turns,
      end.tokens,
      end.toolCalls,
      end.sandboxSeconds,
      end.startedAt,
      end.endedAt,
      member,
    );
  }

  setAdvantage(member: number, advantage: number | null): void {
    this.sql.exec("UPDATE members SET advantage = ? WHERE member = ?", advantage, member);
  }

  appendEvent(type: RolloutEventType, at: string, data: unknown): number {
    this.sql.exec("INSERT INTO events (type, at, data) VALUES (?, ?, ?)", type, at, JSON.stringify(data));
    return this.lastEventId();
  }

  eventsAfter(after: number, limit: number): StoredRunEvent[] {
    return this.sql
      .exec<StoredRunEvent>("SELECT id, type, at, data FROM events WHERE id > ? ORDER BY id LIMIT ?", after, limit)
      .toArray();
  }

  lastEventId(): number {
    return this.sql.exec<{ id: number | null }>("SELECT max(id) AS id FROM events").one().id ?? 0;
  }
}
