/**
 * A rollout's verifier log for its org: the tests' output says why an attempt failed, and it can
 * quote the task's code and files, so it leaves the rollout's object only sealed to the org's key
 * (`seal.ts`), which the edge cannot open. It is bound to the rollout (its AgentTask id, the run's
 * id and member number) and to the `eval_attempts` table it is kept in, so a log copied to another
 * attempt's row does not open. Only its last `VERIFIER_LOG_BYTES` are kept: the end of a test run
 * is where it says what failed, and one sealed log must fit one lake row.
 */
import { openSealed, sealTo, type SealBinding } from "./seal.js";
import type { OrgSealKey } from "./rollout-rows.js";

export const VERIFIER_LOG_BYTES = 64 * 1024;

/** A verifier log sealed to its org's key: base64url, as the lake's sealed cells are. */
export interface SealedVerifierLog {
  content_key_id: string;
  content: string;
}

export const verifierLogBinding = (orgId: string, rolloutId: string, keyId: string): SealBinding => ({
  orgId,
  table: "eval_attempts",
  rowId: rolloutId,
  keyId,
});

const encoder = new TextEncoder();

/** The log's last `VERIFIER_LOG_BYTES` of UTF-8, led by how much was left out when anything was. */
export function verifierLogTail(log: string): Uint8Array {
  const bytes = encoder.encode(log);
  if (bytes.byteLength <= VERIFIER_LOG_BYTES) return bytes;
  // The note is under 64 bytes whatever the count: what follows it fills the rest.
  const kept = VERIFIER_LOG_BYTES - 64;
  const note = encoder.encode(`[… ${bytes.byteLength - kept} bytes omitted …]\n`);
  const out = new Uint8Array(note.byteLength + kept);
  out.set(note);
  out.set(bytes.subarray(bytes.byteLength - kept), note.byteLength);
  return out;
}

export async function sealVerifierLog(
  key: OrgSealKey,
  orgId: string,
  rolloutId: string,
  log: string,
): Promise<SealedVerifierLog> {
  return {
    content_key_id: key.keyId,
    content: await sealTo(key.publicKey, verifierLogTail(log), verifierLogBinding(orgId, rolloutId, key.keyId)),
  };
}

/** The log's text, with the org's private key; rejects if it was sealed to another key or another rollout. */
export async function openVerifierLog(
  privateKey: { key: CryptoKey; publicKey: Uint8Array },
  orgId: string,
  rolloutId: string,
  sealed: SealedVerifierLog,
): Promise<string> {
  const bytes = await openSealed(
    privateKey,
    sealed.content,
    verifierLogBinding(orgId, rolloutId, sealed.content_key_id),
  );
  return new TextDecoder().decode(bytes);
}
