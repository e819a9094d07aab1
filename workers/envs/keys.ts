/**
 * Org sealing keys in D1, and the isolate's copy of each for the gateway's capture (a lookup per
 * captured call would be a D1 read per model turn). A replaced key reaches this isolate at once and
 * others within `TTL_MS`; rows sealed to the old key in that time still open with its private key.
 */
import { eq } from "drizzle-orm";
import { readOrgSealKey } from "../../durable-objects/lake/org-seal-key.js";
import type { OrgSealKey } from "../../protocol/envs/rollout-rows.js";
import type { Db } from "../db/client.js";
import { orgSealKeys } from "../db/schema.js";

const TTL_MS = 60_000;
const cache = new Map<string, { key: OrgSealKey | null; until: number }>();

export async function getOrgKey(db: Db, orgId: string) {
  return (await db.query.orgSealKeys.findFirst({ where: eq(orgSealKeys.orgId, orgId) })) ?? null;
}

export async function putOrgKey(db: Db, row: { orgId: string; userId: string; keyId: string; publicKey: string }) {
  const [stored] = await db
    .insert(orgSealKeys)
    .values(row)
    .onConflictDoUpdate({
      target: orgSealKeys.orgId,
      set: { keyId: row.keyId, publicKey: row.publicKey, userId: row.userId, createdAt: new Date() },
    })
    .returning();
  cache.delete(row.orgId);
  return stored!;
}

/** The org's current sealing key, or null when it has none (its rollouts are then not captured). */
export async function orgSealKey(d1: D1Database, orgId: string): Promise<OrgSealKey | null> {
  const hit = cache.get(orgId);
  if (hit && hit.until > Date.now()) return hit.key;
  const key = await readOrgSealKey(d1, orgId);
  cache.set(orgId, { key, until: Date.now() + TTL_MS });
  return key;
}
