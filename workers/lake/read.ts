/** Reading the lake from the edge: a day's manifests, and columns of a partition's files. */
import { parquetReadObjects } from "hyparquet";
import { MissingLakeFile, r2Buffer } from "../../durable-objects/lake/r2-buffer.js";
import { LakeManifest, type LakeRow, type LakeTable } from "../../protocol/lake.js";

/** The manifests under `prefix` (a table's day, or all of a table). */
export async function manifests(bucket: R2Bucket, prefix: string): Promise<LakeManifest[]> {
  const keys: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ prefix, cursor });
    for (const object of page.objects) if (object.key.endsWith("/_manifest.json")) keys.push(object.key);
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  const found = await Promise.all(keys.map(async (key) => (await bucket.get(key))?.json()));
  return found
    .flatMap((m) => {
      const parsed = LakeManifest.safeParse(m);
      return parsed.success ? [parsed.data] : [];
    })
    .sort((a, b) => a.hour.localeCompare(b.hour));
}

/**
 * `columns` of every row of a table's day, hour by hour, as the manifests list the files. A file a
 * compaction replaced between the listing and the read is read again from the fresh manifest.
 */
export async function readDay(
  bucket: R2Bucket,
  table: LakeTable,
  day: string,
  columns: string[],
): Promise<Map<string, LakeRow[]>> {
  const byHour = new Map<string, LakeRow[]>();
  for (let attempt = 0; ; attempt++) {
    byHour.clear();
    try {
      for (const manifest of await manifests(bucket, `lake/${table}/day=${day}/`)) {
        const rows: LakeRow[] = [];
        for (const file of manifest.files) {
          const read = await parquetReadObjects({ file: r2Buffer(bucket, file.key, file.bytes), columns });
          for (const row of read) {
            for (const [name, value] of Object.entries(row))
              if (value instanceof Date) row[name] = value.getTime();
              else if (typeof value === "bigint") row[name] = Number(value);
            rows.push(row as LakeRow);
          }
        }
        byHour.set(manifest.hour, rows);
      }
      return byHour;
    } catch (err) {
      if (attempt >= 2 || !(err instanceof MissingLakeFile)) throw err;
    }
  }
}
