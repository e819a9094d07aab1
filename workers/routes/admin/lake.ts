/**
 * The lake for operators and data teams: each partition's manifest, its Parquet files to download
 * (`sextant admin lake export` pulls a day with these), and compaction on demand.
 */
import { Hono } from "hono";
import { z } from "zod";
import { LakeDay, LakeHour, LakeTable, partitionName } from "../../../protocol/lake.js";
import { manifests } from "../../lake/read.js";
import type { AppEnv } from "../../app-env.js";
import { jsonBody, validated } from "../../middleware/json-body.js";
import { ApiError } from "../../problem.js";

const ListQuery = z.strictObject({ table: LakeTable, day: LakeDay });
const Target = z.strictObject({ table: LakeTable, day: LakeDay, hour: LakeHour });
/** What a lake file's key may be: a partition's Parquet file, nothing else in the bucket. */
const FILE_KEY = /^lake\/[a-z_]+\/day=\d{4}-\d{2}-\d{2}\/hour=\d{2}\/[a-z]+-\d{6}\.parquet$/;

export const adminLake = new Hono<AppEnv>()
  .get("/partitions", async (c) => {
    const { table, day } = validated(ListQuery, c.req.query(), "query");
    const partitions = await manifests(c.env.LAKE, `lake/${table}/day=${day}/`);
    return c.json({ table, day, partitions });
  })
  .get("/files/*", async (c) => {
    const key = decodeURIComponent(c.req.path.slice(c.req.path.indexOf("/files/") + "/files/".length));
    if (!FILE_KEY.test(key)) throw new ApiError("invalid_request", "Name a lake Parquet file, as a manifest lists it.");
    const object = await c.env.LAKE.get(key);
    if (!object) throw new ApiError("not_found", `No lake file \`${key}\` (compaction may have replaced it).`);
    return new Response(object.body, {
      headers: {
        "Content-Type": "application/vnd.apache.parquet",
        "Content-Length": String(object.size),
        ETag: object.httpEtag,
      },
    });
  })
  .post("/compact", async (c) => {
    const target = await jsonBody(c, Target);
    const stub = c.env.LAKE_PARTITION.get(c.env.LAKE_PARTITION.idFromName(partitionName(target)));
    const manifest = await stub.manifest();
    if (!manifest) throw new ApiError("not_found", `No lake partition ${partitionName(target)}.`);
    return c.json(await stub.compact());
  });
