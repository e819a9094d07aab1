/**
 * An org's sealing key (`PUT /v1/envs/keys`, D1 `org_seal_keys`) as objects read it, to seal a
 * rollout's rows (protocol/envs/rollout-rows.ts). Null when the org has none: its rollouts are then
 * not captured.
 */
import { fromBase64url } from "../../protocol/base64.js";
import type { OrgSealKey } from "../../protocol/envs/rollout-rows.js";

export async function readOrgSealKey(db: D1Database, orgId: string): Promise<OrgSealKey | null> {
  const row = await db
    .prepare("SELECT key_id, public_key FROM org_seal_keys WHERE org_id = ?")
    .bind(orgId)
    .first<{ key_id: string; public_key: string }>();
  return row ? { keyId: row.key_id, publicKey: fromBase64url(row.public_key) } : null;
}
