/**
 * An eval run's attempts, as its rollout run keeps and sends them: what a member's report brings
 * that the member rows do not hold (its prompt and completion tokens), and one `eval_attempts` row
 * per member once it has ended, however it ended (reported, never started, out of quota). A row is
 * marked sent once the queue took it; a send that fails is made again by the run's alarm, and a row
 * sent twice lands once (its id and time are fixed).
 */
import { evalAttemptRow, type EndedMember, type EvalRef } from "../../protocol/evals/attempt.js";
import type { LakeMessage } from "../../protocol/lake.js";
import type { RolloutEnded as MemberReport } from "../../protocol/envs/run.js";
import type { SealedVerifierLog } from "../../protocol/envs/verifier-log.js";
import { sendRows } from "../lake/send.js";
import type { RunTask } from "../../protocol/envs/rollouts.js";
import type { MemberRow, RunState } from "./store.js";

/** An eval run's rollout run as its report reads it: where it stands and every ended attempt. */
export interface EvalAttempts {
  status: RunState["status"];
  tasks: RunTask[];
  groupSize: number;
  createdAt: string;
  endedAt: string | null;
  attempts: EndedMember[];
}

type AttemptRow = MemberRow & { prompt_tokens: number | null; completion_tokens: number | null };

export class EvalRows {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS eval_attempts (
        member INTEGER PRIMARY KEY, prompt_tokens INTEGER, completion_tokens INTEGER,
        sent INTEGER NOT NULL DEFAULT 0
      );
    `);
  }

  /** The tokens a member's first report counts. */
  keep(report: MemberReport): void {
    this.sql.exec(
      "INSERT OR IGNORE INTO eval_attempts (member, prompt_tokens, completion_tokens) VALUES (?, ?, ?)",
      report.member,
      report.promptTokens ?? null,
      report.completionTokens ?? null,
    );
  }

  /**
   * Has every row sent again with the next send: at the run's end, so that rows a queue lost
   * between taking them and delivering them reach the lake after all. `npm start`'s queue holds
   * messages in memory, so an edge stopped mid-run drops the rows it had not delivered yet; the
   * lake keeps one row per id, so a row that did land costs one duplicate it drops.
   */
  sendAgain(): void {
    this.sql.exec("UPDATE eval_attempts SET sent = 0");
  }

  /** Every ended member, as an attempt. */
  ended(state: RunState): EndedMember[] {
    return this.sql
      .exec<AttemptRow>(
        `SELECT m.*, e.prompt_tokens, e.completion_tokens
         FROM members m LEFT JOIN eval_attempts e USING (member) WHERE m.state = 'ended' ORDER BY m.member`,
      )
      .toArray()
      .map((m) => endedMember(state, m));
  }

  /**
   * Sends the row of every ended member not yet sent, each with its verifier log as the member
   * sealed it (`logOf`); rejects if the queue refused them.
   */
  async send(
    state: RunState,
    records: Queue<LakeMessage>,
    logOf: (member: number) => SealedVerifierLog | null,
  ): Promise<void> {
    if (!state.eval) return;
    const due = this.sql
      .exec<AttemptRow>(
        `SELECT m.*, e.prompt_tokens, e.completion_tokens
         FROM members m LEFT JOIN eval_attempts e USING (member)
         WHERE m.state = 'ended' AND coalesce(e.sent, 0) = 0 ORDER BY m.member`,
      )
      .toArray();
    if (!due.length) return;
    const ref = evalRef(state);
    const rows = due.map((m) => evalAttemptRow(ref, endedMember(state, m), logOf(m.member)));
    await sendRows(records, "eval_attempts", rows);
    for (const m of due)
      this.sql.exec(
        `INSERT INTO eval_attempts (member, sent) VALUES (?, 1) ON CONFLICT (member) DO UPDATE SET sent = 1`,
        m.member,
      );
  }
}

export function evalRef(state: RunState): EvalRef {
  const agent = state.agent ?? "model";
  return {
    evalId: state.eval!.id,
    runId: state.id,
    orgId: state.orgId,
    taskset: state.taskset,
    agent,
    model: agent === "model" ? state.policy.model : null,
    checkpoint: state.policy.checkpoint ?? null,
    price: state.eval!.price,
    createdAt: Date.parse(state.createdAt),
  };
}

function endedMember(state: RunState, m: AttemptRow): EndedMember {
  return {
    member: m.member,
    attempt: m.gi,
    task: state.tasks[m.grp]!,
    reward: m.reward,
    outcome: m.outcome ?? "unknown",
    turns: m.turns ?? 0,
    tokens: m.tokens ?? 0,
    toolCalls: m.tool_calls ?? 0,
    sandboxSeconds: m.sandbox_seconds ?? 0,
    startedAt: m.started_at,
    endedAt: m.ended_at,
    promptTokens: m.prompt_tokens,
    completionTokens: m.completion_tokens,
  };
}
