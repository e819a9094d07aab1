/**
 * A task object's SQLite storage: the task's state (no code in it), its event log, the conversation
 * and queued follow-ups, and each tool call's progress. Every payload that can hold code is sealed
 * (`seal.ts`) before it is written.
 */
import type {
  EndReason,
  EventType,
  TaskLimits,
  TaskStatus,
  TaskUsage,
  TaskWorkspace,
} from "../../protocol/agents/task.js";

export interface CreateTask {
  id: string;
  orgId: string;
  userId: string;
  keyId: string;
  prompt: string;
  model: string;
  limits: Partial<TaskLimits>;
  /** Upload files before starting (`start`), or start at once on an empty tree. */
  waitForUpload: boolean;
  /** Passed to the sandbox (which keeps the secret in memory); the object keeps only the id. */
  workspace?: TaskWorkspace | undefined;
  /** A `.tar.gz` or `.tar` to fetch into the sandbox before the task starts by itself. */
  archiveUrl?: string | undefined;
}

export interface TaskState {
  id: string;
  orgId: string;
  userId: string;
  keyId: string;
  model: string;
  status: TaskStatus;
  limits: TaskLimits;
  usage: TaskUsage;
  endReason: EndReason | null;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  /** Consecutive failed attempts at the current step (model or sandbox unreachable). */
  retries: number;
  /** The workspace codebase_search reads; its secret is only in the sandbox. Absent: no codebase_search. */
  workspaceId?: string;
  /**
   * What runs the turns: absent, the production loop for a user (an agent task); `env`, an
   * environment session whose turns come from its step requests; `rollout`, the production loop on
   * a task-set task for a run, verified when it ends.
   */
  kind?: "env" | "rollout";
  /** The task-set task a session or rollout works on. */
  env?: EnvTaskState;
}

export interface EnvTaskState {
  taskSetId: string;
  taskIndex: number;
  sha256: string;
  seed?: number;
  /** A session with no request for this long ends itself. */
  idleSeconds: number;
  /** When the session last had a request (ms since the epoch). */
  lastSeenAt: number;
  /** Set once verified: no step runs after it. */
  reward?: number;
  components?: Record<string, number>;
  /** A rollout: the sampling its model calls are made with, and the run told when it ends. */
  sampling?: Sampling;
  parent?: { runId: string; member: number };
  /** A rollout played without a model (`no-model.ts`); absent, the model plays it. */
  agent?: "oracle" | "noop";
  /** A rollout whose end the run has been told of. */
  reported?: boolean;
  /** The sandbox was destroyed (the session was deleted or sat idle, the rollout reported): nothing more can run. */
  destroyed?: boolean;
}

export interface Sampling {
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  seed?: number;
}

export interface StoredEvent {
  id: number;
  type: EventType;
  at: string;
  sealed: ArrayBuffer | null;
}

export interface StoredCall {
  id: string;
  turn: number;
  idx: number;
  tool: string;
  state: "pending" | "done";
  sealed: ArrayBuffer;
}

export class TaskStore {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS task (one INTEGER PRIMARY KEY CHECK (one = 1), json TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, type TEXT NOT NULL, at TEXT NOT NULL, sealed BLOB);
      CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY, sealed BLOB NOT NULL);
      CREATE TABLE IF NOT EXISTS inbox (seq INTEGER PRIMARY KEY, sealed BLOB NOT NULL);
      CREATE TABLE IF NOT EXISTS source (one INTEGER PRIMARY KEY CHECK (one = 1), sealed BLOB NOT NULL);
      CREATE TABLE IF NOT EXISTS calls (
        id TEXT PRIMARY KEY, turn INTEGER NOT NULL, idx INTEGER NOT NULL, tool TEXT NOT NULL,
        state TEXT NOT NULL, sealed BLOB NOT NULL
      );
      CREATE TABLE IF NOT EXISTS call_results (id TEXT PRIMARY KEY, sealed BLOB NOT NULL);
      CREATE TABLE IF NOT EXISTS verdict (one INTEGER PRIMARY KEY CHECK (one = 1), sealed BLOB NOT NULL);
    `);
  }

  state(): TaskState | undefined {
    const row = this.sql.exec<{ json: string }>("SELECT json FROM task WHERE one = 1").toArray()[0];
    return row ? (JSON.parse(row.json) as TaskState) : undefined;
  }

  saveState(state: TaskState): void {
    this.sql.exec(
      "INSERT INTO task (one, json) VALUES (1, ?) ON CONFLICT (one) DO UPDATE SET json = excluded.json",
      JSON.stringify(state),
    );
  }

  appendEvent(type: EventType, at: string, sealed: Uint8Array | null): number {
    this.sql.exec("INSERT INTO events (type, at, sealed) VALUES (?, ?, ?)", type, at, sealed);
    return this.lastEventId();
  }

  lastEventId(): number {
    return this.sql.exec<{ id: number | null }>("SELECT max(id) AS id FROM events").one().id ?? 0;
  }

  eventsAfter(after: number, limit = 500): StoredEvent[] {
    return this.sql
      .exec<{
        id: number;
        type: EventType;
        at: string;
        sealed: ArrayBuffer | null;
      }>("SELECT id, type, at, sealed FROM events WHERE id > ? ORDER BY id LIMIT ?", after, limit)
      .toArray();
  }

  appendMessage(sealed: Uint8Array): void {
    this.sql.exec("INSERT INTO messages (sealed) VALUES (?)", sealed);
  }

  /** The conversation's sealed messages after the first `skip`, in order. */
  messages(skip = 0): ArrayBuffer[] {
    return this.sql
      .exec<{ sealed: ArrayBuffer }>("SELECT sealed FROM messages ORDER BY seq LIMIT -1 OFFSET ?", skip)
      .toArray()
      .map((r) => r.sealed);
  }

  /** Where the task's code is still to come from (sealed: an archive's URL can name a private repository). */
  setSource(sealed: Uint8Array | null): void {
    if (sealed) this.sql.exec("INSERT OR REPLACE INTO source (one, sealed) VALUES (1, ?)", sealed);
    else this.sql.exec("DELETE FROM source");
  }

  source(): ArrayBuffer | undefined {
    return this.sql.exec<{ sealed: ArrayBuffer }>("SELECT sealed FROM source WHERE one = 1").toArray()[0]?.sealed;
  }

  queueFollowUp(sealed: Uint8Array): void {
    this.sql.exec("INSERT INTO inbox (sealed) VALUES (?)", sealed);
  }

  /** The queued follow-ups, removed from the queue. */
  takeFollowUps(): ArrayBuffer[] {
    const rows = this.sql.exec<{ sealed: ArrayBuffer }>("SELECT sealed FROM inbox ORDER BY seq").toArray();
    this.sql.exec("DELETE FROM inbox");
    return rows.map((r) => r.sealed);
  }

  addCall(call: Omit<StoredCall, "state" | "sealed"> & { sealed: Uint8Array }): void {
    this.sql.exec(
      "INSERT INTO calls (id, turn, idx, tool, state, sealed) VALUES (?, ?, ?, ?, 'pending', ?)",
      call.id,
      call.turn,
      call.idx,
      call.tool,
      call.sealed,
    );
  }

  pendingCalls(): StoredCall[] {
    return this.sql
      .exec<{
        id: string;
        turn: number;
        idx: number;
        tool: string;
        state: "pending";
        sealed: ArrayBuffer;
      }>("SELECT id, turn, idx, tool, state, sealed FROM calls WHERE state = 'pending' ORDER BY turn, idx")
      .toArray();
  }

  completeCall(id: string): void {
    this.sql.exec("UPDATE calls SET state = 'done' WHERE id = ?", id);
  }

  /** A call's tool message as the model (or a session's client) was sent it. */
  saveResult(id: string, sealed: Uint8Array): void {
    this.sql.exec("INSERT OR REPLACE INTO call_results (id, sealed) VALUES (?, ?)", id, sealed);
  }

  /** Turn `turn`'s calls in order, each with its recorded tool message (null if none was recorded). */
  turnResults(turn: number): { id: string; call: ArrayBuffer; result: ArrayBuffer | null }[] {
    return this.sql
      .exec<{ id: string; call: ArrayBuffer; result: ArrayBuffer | null }>(
        `SELECT c.id AS id, c.sealed AS call, r.sealed AS result FROM calls c
         LEFT JOIN call_results r ON r.id = c.id WHERE c.turn = ? ORDER BY c.idx`,
        turn,
      )
      .toArray();
  }

  /** The task's verification (sealed: its log can hold the tests' output). */
  setVerdict(sealed: Uint8Array): void {
    this.sql.exec("INSERT OR REPLACE INTO verdict (one, sealed) VALUES (1, ?)", sealed);
  }

  verdict(): ArrayBuffer | undefined {
    return this.sql.exec<{ sealed: ArrayBuffer }>("SELECT sealed FROM verdict WHERE one = 1").toArray()[0]?.sealed;
  }
}
