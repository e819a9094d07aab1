import { and, desc, eq, isNull, type SQL } from "drizzle-orm";
import { displayPrefix, generateApiKey, hashApiKey } from "../../protocol/api-key.js";
import { newId } from "../../protocol/ids.js";
import type { LimitOverrides } from "../../protocol/limits.js";
import type { CreatedApiKey, EventContent, Plan, Role } from "../../protocol/schemas.js";
import type { Principal } from "../auth/principal.js";
import { activeAccountThrottle } from "./abuse.js";
import type { Db } from "./client.js";
import { toApiKey, toOrg, toUser } from "./rows.js";
import { apiKeys, orgs, users } from "./schema.js";

export async function createOrg(db: Db, input: { name: string; plan: Plan }) {
  const [row] = await db
    .insert(orgs)
    .values({ id: newId("org"), ...input })
    .returning();
  return toOrg(row!);
}

export async function listOrgs(db: Db) {
  return (await db.select().from(orgs).orderBy(desc(orgs.createdAt))).map(toOrg);
}

export async function getOrg(db: Db, orgId: string) {
  const row = await db.query.orgs.findFirst({ where: eq(orgs.id, orgId) });
  return row ? toOrg(row) : null;
}

export async function updateOrg(
  db: Db,
  orgId: string,
  patch: { name?: string; plan?: Plan; limits?: LimitOverrides | null; eventContent?: EventContent },
) {
  const [row] = await db.update(orgs).set(patch).where(eq(orgs.id, orgId)).returning();
  return row ? toOrg(row) : null;
}

export async function findUserByEmail(db: Db, email: string) {
  const row = await db.query.users.findFirst({ where: eq(users.email, email) });
  return row ? toUser(row) : null;
}

export async function createUser(db: Db, orgId: string, input: { email: string; name?: string; role: Role }) {
  const [row] = await db
    .insert(users)
    .values({ id: newId("usr"), orgId, email: input.email, name: input.name ?? null, role: input.role })
    .returning();
  return toUser(row!);
}

export async function listUsers(db: Db, orgId: string) {
  return (await db.select().from(users).where(eq(users.orgId, orgId)).orderBy(users.createdAt)).map(toUser);
}

export async function getUser(db: Db, userId: string) {
  const row = await db.query.users.findFirst({ where: eq(users.id, userId) });
  return row ? toUser(row) : null;
}

/** Mints a key; the plaintext is in the return value and nowhere else. */
export async function createApiKey(
  db: Db,
  input: { orgId: string; userId: string; name: string; expiresAt?: string },
): Promise<CreatedApiKey> {
  const key = generateApiKey();
  const [row] = await db
    .insert(apiKeys)
    .values({
      id: newId("key"),
      orgId: input.orgId,
      userId: input.userId,
      name: input.name,
      hash: await hashApiKey(key),
      prefix: displayPrefix(key),
      expiresAt: input.expiresAt ? new Date(input.expiresAt) : null,
    })
    .returning();
  return { ...toApiKey(row!), key };
}

export async function listApiKeys(db: Db, orgId: string) {
  return (await db.select().from(apiKeys).where(eq(apiKeys.orgId, orgId)).orderBy(desc(apiKeys.createdAt))).map(
    toApiKey,
  );
}

export async function getApiKey(db: Db, keyId: string) {
  const row = await db.query.apiKeys.findFirst({ where: eq(apiKeys.id, keyId) });
  return row ? toApiKey(row) : null;
}

/** Revokes once; revoking again keeps the original time, so the call is idempotent. */
export async function revokeApiKey(db: Db, keyId: string) {
  await db
    .update(apiKeys)
    .set({ revokedAt: new Date() })
    .where(and(eq(apiKeys.id, keyId), isNull(apiKeys.revokedAt)));
  return getApiKey(db, keyId);
}

/** One indexed query that resolves a key hash to the key, its user and its org. */
export async function findPrincipalByHash(db: Db, hash: string): Promise<Principal | null> {
  return findPrincipal(db, eq(apiKeys.hash, hash));
}

async function findPrincipal(db: Db, where: SQL): Promise<Principal | null> {
  const [row] = await db
    .select({ key: apiKeys, user: users, org: orgs })
    .from(apiKeys)
    .innerJoin(users, eq(users.id, apiKeys.userId))
    .innerJoin(orgs, eq(orgs.id, apiKeys.orgId))
    .where(where)
    .limit(1);
  if (!row) return null;
  const throttle = await activeAccountThrottle(db, row.user.id);
  return {
    key: toApiKey(row.key),
    user: toUser(row.user),
    org: toOrg(row.org),
    throttle: throttle ? { reason: throttle.reason, until: Date.parse(throttle.expiresAt) } : null,
  };
}

/** A key's principal by the key's id (a task object acting for the key that started it). */
export async function findPrincipalByKeyId(db: Db, keyId: string): Promise<Principal | null> {
  return findPrincipal(db, eq(apiKeys.id, keyId));
}

export async function touchApiKey(db: Db, keyId: string, at: Date) {
  await db.update(apiKeys).set({ lastUsedAt: at }).where(eq(apiKeys.id, keyId));
}
