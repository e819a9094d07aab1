import { DuckDBInstance } from "@duckdb/node-api";

/** Rows of `sql` in a fresh in-memory DuckDB, as plain objects (BIGINT counts as numbers). */
export async function duckQuery(sql: string): Promise<Record<string, unknown>[]> {
  const db = await DuckDBInstance.create(":memory:");
  const connection = await db.connect();
  try {
    return (await connection.runAndReadAll(sql))
      .getRowObjectsJS()
      .map((row) =>
        Object.fromEntries(Object.entries(row).map(([k, v]) => [k, typeof v === "bigint" ? Number(v) : v])),
      );
  } finally {
    connection.closeSync();
  }
}
