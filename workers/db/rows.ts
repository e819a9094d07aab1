import type { ApiKeyInfo, Org, User, Workspace } from "../../protocol/schemas.js";
import type { apiKeys, orgs, users, workspaces } from "./schema.js";

const iso = (date: Date) => date.toISOString();
const isoOrNull = (date: Date | null) => (date ? date.toISOString() : null);

export const toOrg = (row: typeof orgs.$inferSelect): Org => ({
  id: row.id,
  name: row.name,
  plan: row.plan,
  limits: row.limits ?? null,
  eventContent: row.eventContent,
  createdAt: iso(row.createdAt),
});

export const toUser = (row: typeof users.$inferSelect): User => ({
  id: row.id,
  orgId: row.orgId,
  email: row.email,
  name: row.name,
  role: row.role,
  createdAt: iso(row.createdAt),
});

export const toApiKey = (row: typeof apiKeys.$inferSelect): ApiKeyInfo => ({
  id: row.id,
  orgId: row.orgId,
  userId: row.userId,
  name: row.name,
  prefix: row.prefix,
  createdAt: iso(row.createdAt),
  expiresAt: isoOrNull(row.expiresAt),
  revokedAt: isoOrNull(row.revokedAt),
  lastUsedAt: isoOrNull(row.lastUsedAt),
});

export const toWorkspace = (row: typeof workspaces.$inferSelect): Workspace => ({
  id: row.id,
  orgId: row.orgId,
  name: row.name,
  createdAt: iso(row.createdAt),
});
