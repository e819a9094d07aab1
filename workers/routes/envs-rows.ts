import { Hono } from "hono";
import { parquetReadObjects } from "hyparquet";
import { MissingLakeFile, r2Buffer } from "../../durable-objects/lake/r2-buffer.js";
import { CaptureTable, RowsQuery, type RowsAnswer } from "../../protocol/envs/capture.js";
import { partitionPrefix, type LakeRow } from "../../protocol/lake.js";
import type { AppEnv } from "../app-env.js";
import { manifests } from "../lake/read.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { ApiError } from "../problem.js";

/**
 * An org's own rollout and eval-attempt rows, an hour of the lake at a time (the hour of each
 * rollout's start, of each eval run's creation): what `sextant envs export` reads, so exporting
 * needs an API key and never the operator's access. Rows come as the lake holds them, content
 * sealed to the org's key; other orgs' rows in the same files are never returned.
 */
export const envRows = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("admin"))
  .get("/:table", async (c) => {
    const table = CaptureTable.safeParse(c.req.param("table"));
    if (!table.success) throw new ApiError("not_found", "The tables are rollouts, rollout_steps and eval_attempts.");
    const query = RowsQuery.safeParse(c.req.query());
    if (!query.success)
      throw new ApiError(
        "invalid_request",
        query.error.issues.map((i) => `${i.path.join(".") || "query"}: ${i.message}`).join("; "),
      );
    const { day, hour, run, rollout, eval: evalId } = query.data;
    const orgId = c.get("principal").org.id;
    const prefix = partitionPrefix({ table: table.data, day, hour });
    const keep = (row: LakeRow) =>
      row.org_id === orgId &&
      (!run || row.run_id === run) &&
      (!rollout || row.rollout_id === rollout) &&
      (!evalId || row.eval_id === evalId);
    for (let attempt = 0; ; attempt++) {
      try {
        const rows: LakeRow[] = [];
        for (const manifest of await manifests(c.env.LAKE, prefix))
          for (const file of manifest.files) {
            const read = await parquetReadObjects({ file: r2Buffer(c.env.LAKE, file.key, file.bytes) });
            for (const row of read) {
              for (const [name, value] of Object.entries(row))
                if (value instanceof Date) row[name] = value.getTime();
                else if (typeof value === "bigint") row[name] = Number(value);
              if (keep(row as LakeRow)) rows.push(row as LakeRow);
            }
          }
        const body: RowsAnswer = { table: table.data, day, hour, rows: rows as RowsAnswer["rows"] };
        return c.json(body);
      } catch (err) {
        // A compaction replaced a file between the manifest and the read: read the fresh manifest.
        if (attempt >= 2 || !(err instanceof MissingLakeFile)) throw err;
      }
    }
  });
