/**
 * A rollout's end: once its loop has ended, the task's tests score its tree (once: the verify call
 * id makes a repeat answer the record), its conversation is sent to the lake as `rollout_steps` rows
 * sealed to its org's key (`capture.ts`; a rollout played without a model has none), and its run is
 * told (`ENV_RUN`'s `rolloutEnded`, with its prompt and completion tokens from its usage, counted
 * whether or not it is captured, the sealed opening its `rollouts` row needs and the verifier's log
 * sealed to the org's key), each retried by the task's alarm with backoff. Out of tries at
 * verifying, the run is told there is no reward and why; out of tries at capturing, the run is told
 * without the opening and the log (the gateway's rows of each call stand); out of tries at telling
 * it, the run learns of the end when it reads the task. Once reported, the rollout's sandbox is
 * destroyed on its host (retried the same way; out of tries, the host's idle limit takes it): nothing
 * reads a rollout's tree after its report, and the host holds each org to a number of sandboxes, so
 * one kept for its idle limit would take a place from the org's next rollouts.
 */
import type { VerifyResponse } from "../../protocol/envs/api.js";
import type { RolloutEnded } from "../../protocol/envs/run.js";
import { sealVerifierLog, type SealedVerifierLog } from "../../protocol/envs/verifier-log.js";
import { readOrgSealKey } from "../lake/org-seal-key.js";
import { captureRollout, type RolloutCapture } from "./capture.js";
import { SandboxUnavailable } from "./sandbox-client.js";
import { unseal } from "./seal.js";
import type { EnvTasks, SessionHost } from "./session.js";
import type { TaskState } from "./store.js";
import { SYSTEM_PROMPT } from "./turn.js";

/** Tries at verifying an ended rollout and at telling its run. */
const MAX_REPORT_TRIES = 12;
/** Tries at sending an ended rollout's rows before its run is told without them. */
const MAX_CAPTURE_TRIES = 3;

export async function reportRollout(host: SessionHost, tasks: EnvTasks, state: TaskState): Promise<void> {
  if (!state.env!.reported && !(await report(host, tasks, state))) return;
  await releaseSandbox(host);
}

/** Verifies, captures and tells the run; false when a step waits for another try. */
async function report(host: SessionHost, tasks: EnvTasks, state: TaskState): Promise<boolean> {
  const env = state.env!;
  let verifyError: string | undefined;
  if (env.reward === undefined) {
    try {
      const key = await host.dataKey(state);
      if (!key) verifyError = "The rollout's sandbox is gone.";
      else await tasks.verifyNow(state, key);
    } catch (err) {
      if (!(err instanceof SandboxUnavailable)) throw err;
      if (err.status !== 404 && (await retry(host))) return false;
      verifyError = err.message;
    }
  }
  let capture: RolloutCapture | null = null;
  let sealedVerifierLog: SealedVerifierLog | undefined;
  const lake = host.lake();
  if (lake) {
    try {
      const state = host.mustState();
      const key = await host.dataKey(state);
      const orgKey = key ? await readOrgSealKey(lake.db, state.orgId) : null;
      if (key && orgKey) {
        // The verdict is kept sealed under the task's data key; its log leaves only sealed to the org.
        const verdict = host.store.verdict();
        if (verdict) {
          const { log } = await unseal<VerifyResponse>(key, verdict);
          sealedVerifierLog = await sealVerifierLog(orgKey, state.orgId, state.id, log);
        }
        if (!state.env?.agent)
          capture = await captureRollout(
            lake,
            host.storage,
            state,
            key,
            orgKey,
            await host.conversation(key),
            SYSTEM_PROMPT,
          );
      }
    } catch (err) {
      console.error(
        JSON.stringify({ level: "warn", message: "rollout rows not sent", rollout: state.id, error: String(err) }),
      );
      // The run's report waits on a few tries only: its reward matters more than this copy of the rows.
      if (host.mustState().retries < MAX_CAPTURE_TRIES && (await retry(host))) return false;
    }
  }
  const current = host.mustState();
  const runs = host.runs();
  if (runs && current.env?.parent) {
    const ended: RolloutEnded = {
      runId: current.env.parent.runId,
      member: current.env.parent.member,
      taskId: current.id,
      reward: current.env.reward ?? null,
      components: current.env.components ?? {},
      outcome: current.endReason ?? "finished",
      ...(verifyError ? { verifyError } : {}),
      usage: current.usage,
      startedAt: current.startedAt,
      endedAt: current.endedAt,
      promptTokens: current.usage.promptTokens ?? null,
      completionTokens: current.usage.completionTokens ?? null,
      ...(capture ?? {}),
      ...(sealedVerifierLog ? { sealedVerifierLog } : {}),
    };
    try {
      await runs.get(runs.idFromName(ended.runId)).rolloutEnded(ended);
    } catch {
      if (await retry(host)) return false;
    }
  }
  const done = host.mustState();
  done.env!.reported = true;
  done.retries = 0;
  host.store.saveState(done);
  return true;
}

/** Destroys the reported rollout's sandbox (a 404 is a sandbox already gone). */
async function releaseSandbox(host: SessionHost): Promise<void> {
  const state = host.mustState();
  if (state.env!.destroyed) return;
  try {
    await host.sandbox(state.id).destroy();
  } catch (err) {
    if (!(err instanceof SandboxUnavailable)) throw err;
    if (await retry(host)) return;
  }
  const done = host.mustState();
  done.env!.destroyed = true;
  done.retries = 0;
  host.store.saveState(done);
}

/** Schedules another try; false when out of tries. */
async function retry(host: SessionHost): Promise<boolean> {
  const state = host.mustState();
  state.retries++;
  host.store.saveState(state);
  if (state.retries >= MAX_REPORT_TRIES) return false;
  await host.storage.setAlarm(Date.now() + 1000 * 2 ** Math.min(state.retries, 8));
  return true;
}
