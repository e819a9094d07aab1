/**
 * A run's `rollouts` rows: one per member, written once its group has ended and so has its
 * advantage. Each member sends its sealed opening (system prompt and instruction, sealed to the
 * org's key by the member, which holds the text) with its end; the run keeps that ciphertext until
 * the group ends, then sends the group's rows and marks them sent. A send that fails is made again
 * by the run's alarm; a row sent twice lands once (the lake keeps one row per identity).
 *
 * A member's verifier log comes with its end the same way, sealed to the org's key by the member,
 * and is kept as that ciphertext (one per member) for the run's attempts rows: the run never sees
 * the log's text.
 */
import { rolloutRow, type SealedOpening } from "../../protocol/envs/rollout-rows.js";
import type { LakeMessage } from "../../protocol/lake.js";
import type { RolloutEnded as MemberReport } from "../../protocol/envs/run.js";
import type { SealedVerifierLog } from "../../protocol/envs/verifier-log.js";
import { sendRows } from "../lake/send.js";
import { rolloutIdOf } from "./report.js";
import type { MemberRow, RunState } from "./store.js";

type CaptureRow = MemberRow & {
  opening: string;
  key_id: string;
  prompt_tokens: number | null;
  completion_tokens: number | null;
};

export class RunCapture {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`
      CREATE TABLE IF NOT EXISTS member_capture (
        member INTEGER PRIMARY KEY, key_id TEXT NOT NULL, opening TEXT NOT NULL,
        prompt_tokens INTEGER, completion_tokens INTEGER, sent INTEGER NOT NULL DEFAULT 0
      );
      CREATE TABLE IF NOT EXISTS member_verifier_log (
        member INTEGER PRIMARY KEY, key_id TEXT NOT NULL, sealed TEXT NOT NULL
      );
    `);
  }

  /** A member's sealed opening and verifier log, each kept from its first report that has one. */
  keep(report: MemberReport): void {
    const log = report.sealedVerifierLog;
    if (log)
      this.sql.exec(
        "INSERT OR IGNORE INTO member_verifier_log (member, key_id, sealed) VALUES (?, ?, ?)",
        report.member,
        log.content_key_id,
        log.content,
      );
    const opening: SealedOpening | undefined = report.sealedOpening;
    if (!opening) return;
    this.sql.exec(
      `INSERT OR IGNORE INTO member_capture (member, key_id, opening, prompt_tokens, completion_tokens)
       VALUES (?, ?, ?, ?, ?)`,
      report.member,
      opening.content_key_id,
      opening.content,
      report.promptTokens ?? null,
      report.completionTokens ?? null,
    );
  }

  /** A member's verifier log as it came, sealed to the org's key; null when it came without one. */
  verifierLog(member: number): SealedVerifierLog | null {
    const row = this.sql
      .exec<{
        key_id: string;
        sealed: string;
      }>("SELECT key_id, sealed FROM member_verifier_log WHERE member = ?", member)
      .toArray()[0];
    return row ? { content_key_id: row.key_id, content: row.sealed } : null;
  }

  /** Sends the rows of every ended group not yet sent; rejects if the queue refused them. */
  async send(state: RunState, records: Queue<LakeMessage>): Promise<void> {
    const due = this.sql
      .exec<CaptureRow>(
        `SELECT m.*, c.key_id, c.opening, c.prompt_tokens, c.completion_tokens
         FROM member_capture c JOIN members m USING (member)
         WHERE c.sent = 0 AND NOT EXISTS (SELECT 1 FROM members o WHERE o.grp = m.grp AND o.state != 'ended')
         ORDER BY m.member`,
      )
      .toArray();
    if (!due.length) return;
    const rows = due.map((m) =>
      rolloutRow(
        {
          orgId: state.orgId,
          rolloutId: rolloutIdOf(state.id, m.member),
          runId: state.id,
          // The member's own start: its steps' partition and `at`, and so this row's.
          startedAt: Date.parse(m.started_at!),
          member: m.member,
          groupIndex: m.gi,
          task: state.tasks[m.grp] ?? null,
          seed: m.seed,
          policy: state.policy.model,
          checkpoint: state.policy.checkpoint ?? null,
          reward: m.reward,
          components: m.components ? (JSON.parse(m.components) as Record<string, number>) : {},
          advantage: m.advantage,
          outcome: m.outcome ?? "unknown",
          turns: m.turns ?? 0,
          toolCalls: m.tool_calls ?? 0,
          promptTokens: m.prompt_tokens,
          completionTokens: m.completion_tokens,
          endedAt: m.ended_at ? Date.parse(m.ended_at) : null,
        },
        { content_key_id: m.key_id, content: m.opening },
      ),
    );
    await sendRows(records, "rollouts", rows);
    for (const m of due) this.sql.exec("UPDATE member_capture SET sent = 1 WHERE member = ?", m.member);
  }
}
