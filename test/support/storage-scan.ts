import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parquetReadObjects } from "hyparquet";

const PARQUET_MAGIC = Buffer.from("PAR1");

/** A Parquet file's values as text (its pages are compressed: the bytes alone would hide them). */
async function parquetText(bytes: Buffer): Promise<Buffer> {
  const file = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  const rows = await parquetReadObjects({ file });
  return Buffer.from(
    JSON.stringify(rows, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v)),
    "utf8",
  );
}

/**
 * A live edge closes SQLite databases while a scan runs, and a closing database checkpoints its
 * `-wal` into the database file and removes the `-wal` and `-shm`. `read` on a file gone between the
 * listing and the read gives undefined, and the scan goes round again (the database file may have
 * been read before the checkpoint); any other error is thrown.
 */
function ifPresent<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch (error) {
    if ((error as NodeJS.ErrnoException)?.code === "ENOENT") return undefined;
    throw error;
  }
}

/**
 * Every file under `dir` (the local edge's D1, R2 and Durable Object storage, WAL files included)
 * that contains any needle as UTF-8, UTF-16LE or base64, returned as "file: needle". A Parquet file
 * (the lake's) is scanned as its decoded values too. Hits from every pass are kept; passes repeat
 * while files vanish mid-pass, up to five.
 */
export async function scanDirectoryFor(dir: string, needles: string[]): Promise<string[]> {
  const forms = needles.flatMap((needle) => [
    [needle, Buffer.from(needle, "utf8")],
    [needle, Buffer.from(needle, "utf16le")],
    [needle, Buffer.from(Buffer.from(needle).toString("base64").slice(0, -4))],
  ]) as [string, Buffer][];
  const hits = new Set<string>();
  let vanished = 0;
  const scan = (file: string, bytes: Buffer) => {
    for (const [needle, form] of forms) if (bytes.includes(form)) hits.add(`${file}: ${needle}`);
  };
  const walk = async (path: string) => {
    for (const name of readdirSync(path)) {
      const child = join(path, name);
      const stats = ifPresent(() => statSync(child));
      if (!stats) {
        vanished += 1;
        continue;
      }
      if (stats.isDirectory()) await walk(child);
      else {
        const bytes = ifPresent(() => readFileSync(child));
        if (!bytes) {
          vanished += 1;
          continue;
        }
        scan(child, bytes);
        if (
          bytes.length >= 12 &&
          bytes.subarray(0, 4).equals(PARQUET_MAGIC) &&
          bytes.subarray(-4).equals(PARQUET_MAGIC)
        )
          scan(`${child} (decoded)`, await parquetText(bytes));
      }
    }
  };
  for (let pass = 0; pass < 5; pass += 1) {
    vanished = 0;
    await walk(dir);
    if (vanished === 0) break;
  }
  return [...hits];
}

/** How many Parquet files are under `dir` (the lake's, in the local R2's blobs). */
export function parquetFilesUnder(dir: string): number {
  let n = 0;
  const walk = (path: string) => {
    for (const name of readdirSync(path)) {
      const child = join(path, name);
      const stats = ifPresent(() => statSync(child));
      if (stats?.isDirectory()) walk(child);
      else if (
        ifPresent(() => readFileSync(child))
          ?.subarray(0, 4)
          .equals(PARQUET_MAGIC)
      )
        n += 1;
    }
  };
  walk(dir);
  return n;
}
