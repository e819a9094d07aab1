import { and, desc, eq } from "drizzle-orm";
import { newId } from "../../protocol/ids.js";
import type { Db } from "./client.js";
import { toWorkspace } from "./rows.js";
import { workspaces } from "./schema.js";

export async function createWorkspace(db: Db, orgId: string, name: string) {
  const [row] = await db
    .insert(workspaces)
    .values({ id: newId("ws"), orgId, name })
    .returning();
  return toWorkspace(row!);
}

export async function listWorkspaces(db: Db, orgId: string) {
  return (
    await db.select().from(workspaces).where(eq(workspaces.orgId, orgId)).orderBy(desc(workspaces.createdAt))
  ).map(toWorkspace);
}

/** Scoped by org: another org's workspace is indistinguishable from one that does not exist. */
export async function getWorkspace(db: Db, orgId: string, workspaceId: string) {
  const row = await db.query.workspaces.findFirst({
    where: and(eq(workspaces.id, workspaceId), eq(workspaces.orgId, orgId)),
  });
  return row ? toWorkspace(row) : null;
}

export async function deleteWorkspace(db: Db, workspaceId: string) {
  await db.delete(workspaces).where(eq(workspaces.id, workspaceId));
}
