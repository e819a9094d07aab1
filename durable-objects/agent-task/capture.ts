/**
 * A rollout's capture for training, from its own object: each model call as answered (with the
 * log-probabilities and token ids its backend returned) is kept sealed under the task's data key,
 * and at the rollout's end its whole conversation is sent as `rollout_steps` rows sealed to the org's
 * key (protocol/envs/rollout-rows.ts), every kept call in its row. The gateway sends each call's row
 * as it is answered; the end's copy of a row is the same call with the same log-probabilities, so
 * whichever copy the lake keeps (the first to commit, which under redelivery may be either) holds
 * them. The `rollouts` row is written by the run once the group's advantages are known, from the
 * opening sealed here.
 */
import { capturedCall } from "../../protocol/envs/captured-call.js";
import {
  rolloutRows,
  type CapturedCall,
  type Message,
  type OrgSealKey,
  type SealedOpening,
} from "../../protocol/envs/rollout-rows.js";
import type { LakeMessage } from "../../protocol/lake.js";
import { sendRows } from "../lake/send.js";
import { seal, unseal } from "./seal.js";
import type { TaskState } from "./store.js";

/** Where a rollout's rows go: the org's keys (D1) and the records queue. */
export interface CaptureBindings {
  db: D1Database;
  records: Queue<LakeMessage>;
}

const PREFIX = "capture:";
const keyOf = (turn: number) => `${PREFIX}${String(turn).padStart(8, "0")}`;

/**
 * Keeps turn `turn`'s answer as captured. Kept before the turn is recorded: a turn asked again
 * (its answer never recorded) replaces it, so what is kept is the answer the conversation holds.
 */
export async function keepCall(
  host: { storage: DurableObjectStorage },
  key: CryptoKey,
  turn: number,
  request: Record<string, unknown>,
  body: unknown,
  asked: number,
  message: Message & { role: "assistant" },
): Promise<void> {
  const call = capturedCall({ turn }, request, body, asked, Date.now());
  if (!call) return;
  await host.storage.put(keyOf(turn), await seal(key, { ...call, message }));
}

async function keptCalls(storage: DurableObjectStorage, key: CryptoKey): Promise<CapturedCall[]> {
  const kept = await storage.list<Uint8Array | ArrayBuffer>({ prefix: PREFIX });
  return Promise.all([...kept.values()].map((sealed) => unseal<CapturedCall>(key, sealed)));
}

/**
 * What the run's `rollouts` row needs from the capture: its sealed opening. Its token counts come
 * from the task's usage, counted for every rollout whether or not it is captured.
 */
export interface RolloutCapture {
  sealedOpening: SealedOpening;
}

/**
 * Sends the ended rollout's `rollout_steps` rows, sealed to its org's key, and answers what its run
 * needs for its `rollouts` row (an org with no sealing key has nothing captured: its caller does not
 * call this). Rejects if the queue refused rows (sending again is safe).
 */
export async function captureRollout(
  lake: CaptureBindings,
  storage: DurableObjectStorage,
  state: TaskState,
  key: CryptoKey,
  orgKey: OrgSealKey,
  conversation: Message[],
  systemPrompt: string,
): Promise<RolloutCapture | null> {
  if (!state.startedAt) return null;
  const calls = await keptCalls(storage, key);
  const startedAt = Date.parse(state.startedAt);
  const endedAt = state.endedAt ? Date.parse(state.endedAt) : null;
  const rows = await rolloutRows({
    summary: {
      orgId: state.orgId,
      rolloutId: state.id,
      runId: state.env?.parent?.runId ?? null,
      startedAt,
      member: null,
      groupIndex: null,
      task: state.env ? { sha256: state.env.sha256, index: state.env.taskIndex } : null,
      seed: state.env?.seed ?? null,
      policy: state.model,
      checkpoint: null,
      reward: state.env?.reward ?? null,
      components: state.env?.components ?? {},
      advantage: null,
      outcome: state.endReason ?? "finished",
      turns: state.usage.turns,
      toolCalls: state.usage.toolCalls,
      promptTokens: null,
      completionTokens: null,
      endedAt,
    },
    conversation: [{ role: "system", content: systemPrompt }, ...conversation],
    calls,
    turnTimes: Object.fromEntries(calls.map((c) => [c.turn, c.at])),
    key: orgKey,
  });
  await sendRows(lake.records, "rollout_steps", rows.rollout_steps);
  const opening = rows.rollouts[0]!;
  return {
    sealedOpening: { content_key_id: String(opening.content_key_id), content: String(opening.content) },
  };
}
