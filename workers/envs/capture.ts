/**
 * The gateway's capture of a rollout's model call: the answer, with the log-probabilities and token
 * ids the backend returned, sealed to the org's key and sent as the call's `rollout_steps` row,
 * after the caller has its answer (`waitUntil`). The prompt is not stored again per call: it is the
 * rollout's opening messages and the steps before, and `prompt_token_ids` when the backend gave them.
 */
import type { AgentCaller } from "../../protocol/agents/gateway.js";
import type { CaptureTag } from "../../protocol/envs/capture.js";
import { capturedCall } from "../../protocol/envs/captured-call.js";
import { modelStepRow } from "../../protocol/envs/rollout-rows.js";
import { sendRows } from "../../durable-objects/lake/send.js";
import { orgSealKey } from "./keys.js";

export { capturedCall };

/** Seals and sends the call's row; never throws (a failure is logged, and the rollout's end rows stand in). */
export async function captureCall(
  env: Env,
  caller: AgentCaller & { capture: CaptureTag },
  request: Record<string, unknown>,
  body: unknown,
  started: number,
  ended: number,
): Promise<void> {
  const tag = caller.capture;
  try {
    const call = capturedCall(tag, request, body, started, ended);
    if (!call) return;
    const key = await orgSealKey(env.DB, caller.orgId);
    if (!key) {
      console.log(
        JSON.stringify({
          level: "info",
          message: "rollout call not captured: the org has no sealing key",
          rollout: tag.rolloutId,
        }),
      );
      return;
    }
    const row = await modelStepRow(
      { orgId: caller.orgId, rolloutId: tag.rolloutId, runId: tag.runId, startedAt: tag.startedAt },
      call,
      key,
    );
    await sendRows(env.RECORDS, "rollout_steps", [row]);
  } catch (err) {
    console.error(
      JSON.stringify({
        level: "warn",
        message: "rollout call capture failed",
        rollout: tag.rolloutId,
        turn: tag.turn,
        error: String(err),
      }),
    );
  }
}
