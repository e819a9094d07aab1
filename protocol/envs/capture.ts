/**
 * Capturing rollouts for training: the org's sealing key (`PUT`/`GET /v1/envs/keys`), what a
 * rollout's model calls ask the backend for (`captureOptions`), how a call is tagged for capture
 * (`CaptureTag`), and the org's own rows read back (`GET /v1/envs/rows/{table}`).
 */
import { z } from "zod";
import { LakeDay, LakeHour } from "../lake.js";
import { parsePublicKey } from "./seal.js";

export const KeyId = z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, "1 to 64 letters, digits, '.', '_' or '-'");

export const PutOrgKeyRequest = z.strictObject({
  /** X25519, the raw 32 bytes as unpadded base64url. */
  publicKey: z.string().refine((k) => parsePublicKey(k) !== null, "a raw 32-byte X25519 public key, base64url"),
  /** Named in every row sealed to it; the key's fingerprint (`keyFingerprint`) when absent. */
  keyId: KeyId.optional(),
});
export type PutOrgKeyRequest = z.input<typeof PutOrgKeyRequest>;

export const OrgKey = z.object({ keyId: z.string(), publicKey: z.string(), createdAt: z.string() });
export type OrgKey = z.infer<typeof OrgKey>;

/** A public key's default id: the first 16 hex digits of its SHA-256. */
export async function keyFingerprint(publicKey: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", publicKey as Uint8Array<ArrayBuffer>));
  return [...digest.subarray(0, 8)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A gateway call that belongs to a rollout: its answer is captured as the rollout's `rollout_steps`
 * row for `turn` (`<rolloutId>.m<turn>`), in the partition of `startedAt`.
 */
export const CaptureTag = z.strictObject({
  rolloutId: z.string().min(1).max(128),
  runId: z.string().min(1).max(128).nullable(),
  turn: z.number().int().min(1).max(1_000_000),
  /** The rollout's start, ms since the epoch. */
  startedAt: z.number().int().min(0),
});
export type CaptureTag = z.infer<typeof CaptureTag>;

/**
 * A chat request's body with what capture needs from a vLLM backend: the sampled tokens'
 * log-probabilities, tokens as `token_id:<n>`, and the answer's and prompt's token ids. Backends that
 * do not know the last two ignore them; a pool served only by Anthropic's API refuses `logprobs`.
 */
export function captureOptions<T extends Record<string, unknown>>(body: T): T & Record<string, unknown> {
  return { ...body, logprobs: true, return_tokens_as_token_ids: true, return_token_ids: true };
}

/** The lake tables an org reads its own rows of: its rollouts, their steps, and its eval runs' attempts. */
export const CAPTURE_TABLES = ["rollouts", "rollout_steps", "eval_attempts"] as const;
export const CaptureTable = z.enum(CAPTURE_TABLES);
export type CaptureTable = z.infer<typeof CaptureTable>;

export const RowsQuery = z.strictObject({
  day: LakeDay,
  hour: LakeHour,
  run: z.string().min(1).max(128).optional(),
  rollout: z.string().min(1).max(128).optional(),
  /** `eval_attempts` only: one eval run's rows. */
  eval: z.string().min(1).max(128).optional(),
});

/** `GET /v1/envs/rows/{table}?day&hour[&run][&rollout][&eval]`: the org's rows of one lake hour, content sealed. */
export const RowsAnswer = z.object({
  table: CaptureTable,
  day: z.string(),
  hour: z.string(),
  rows: z.array(z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null()]))),
});
export type RowsAnswer = z.infer<typeof RowsAnswer>;
