/**
 * The verifier logs of an eval run's failed attempts, opened with the org's private key: each
 * attempt's `eval_attempts` row holds its log sealed to the org's key (`protocol/envs/verifier-log.ts`),
 * which the edge cannot open, so saying why an attempt failed in the tests' own words happens here.
 */
import type { EvalReport } from "../../protocol/evals/api.js";
import { importPrivateKey } from "../../protocol/envs/seal.js";
import { openVerifierLog } from "../../protocol/envs/verifier-log.js";
import type { LakeRow } from "../../protocol/lake.js";

/** A failed attempt's verifier log, opened with the org's key. */
export interface AttemptLog {
  index: number;
  sha256: string;
  attempt: number;
  failureKind: string | null;
  /** Null when there is none to show; `missing` says why. */
  log: string | null;
  missing?: string;
}

/** A run member's rollout, the AgentTask its log is bound to. */
const rolloutOf = (runId: string, member: number) => `${runId}-${member}`;

/** Each failed attempt of the report, in task order, with its log from `rows` (the run's `eval_attempts` rows). */
export async function failedAttemptLogs(
  report: EvalReport,
  rows: LakeRow[],
  key: { keyId: string; privateJwk: JsonWebKey },
): Promise<AttemptLog[]> {
  const privateKey = await importPrivateKey(key.privateJwk);
  const byMember = new Map(rows.filter((r) => r.run_id === report.rolloutRun).map((r) => [Number(r.member), r]));
  const out: AttemptLog[] = [];
  for (const task of report.tasks)
    for (const a of task.attempts) {
      if (a.passed) continue;
      const base = { index: task.index, sha256: task.sha256, attempt: a.attempt, failureKind: a.failureKind };
      const row = byMember.get(a.member);
      const sealed = typeof row?.verifier_log === "string" ? row.verifier_log : null;
      const keyId = typeof row?.content_key_id === "string" ? row.content_key_id : null;
      if (!row) out.push({ ...base, log: null, missing: "its row is not in the lake yet" });
      else if (sealed === null || keyId === null)
        out.push({
          ...base,
          log: null,
          missing: "none was kept (the org had no sealing key, or the verifier never ran)",
        });
      else if (keyId !== key.keyId)
        out.push({ ...base, log: null, missing: `sealed to key ${keyId}, and --key is ${key.keyId}` });
      else
        try {
          const rollout = rolloutOf(report.rolloutRun, a.member);
          const log = await openVerifierLog(privateKey, String(row.org_id), rollout, {
            content_key_id: keyId,
            content: sealed,
          });
          out.push({ ...base, log });
        } catch (err) {
          out.push({ ...base, log: null, missing: `it does not open with --key (${(err as Error).message})` });
        }
    }
  return out;
}
