import { DurableObject } from "cloudflare:workers";
import { z } from "zod";

const WorkspaceMeta = z.object({
  workspaceId: z.string().min(1),
  orgId: z.string().min(1),
  createdAt: z.iso.datetime(),
});
export type WorkspaceMeta = z.infer<typeof WorkspaceMeta>;

/**
 * One object per workspace: the home of its index state. SQLite-backed; every RPC input is
 * validated because a stub can be called by any code holding the namespace binding.
 */
export class Workspace extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.blockConcurrencyWhile(async () => {
      ctx.storage.sql.exec(
        `CREATE TABLE IF NOT EXISTS meta (
           id INTEGER PRIMARY KEY CHECK (id = 1),
           workspace_id TEXT NOT NULL,
           org_id TEXT NOT NULL,
           created_at TEXT NOT NULL
         )`,
      );
    });
  }

  /** Idempotent: a retried create after a dropped connection leaves the same state. */
  async init(input: WorkspaceMeta): Promise<WorkspaceMeta> {
    const parsed = WorkspaceMeta.safeParse(input);
    if (!parsed.success) throw new TypeError(`Invalid workspace metadata: ${parsed.error.message}`);
    const meta = parsed.data;
    const existing = this.#meta();
    if (existing) return existing;
    this.ctx.storage.sql.exec(
      "INSERT INTO meta (id, workspace_id, org_id, created_at) VALUES (1, ?, ?, ?)",
      meta.workspaceId,
      meta.orgId,
      meta.createdAt,
    );
    return meta;
  }

  async describe(): Promise<WorkspaceMeta | null> {
    return this.#meta();
  }

  /** Wipes every byte this object holds; later capabilities keep all their state here too. */
  async destroy(): Promise<void> {
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
  }

  #meta(): WorkspaceMeta | null {
    const rows = this.ctx.storage.sql.exec("SELECT workspace_id, org_id, created_at FROM meta WHERE id = 1").toArray();
    const row = rows[0];
    if (!row) return null;
    return WorkspaceMeta.parse({ workspaceId: row.workspace_id, orgId: row.org_id, createdAt: row.created_at });
  }
}
