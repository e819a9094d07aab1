/**
 * Lake rows to Parquet and back: a file per call (`encodeRows`), or a file assembled row group by
 * row group (`ParquetAssembler`) for compaction, which reads its inputs a row group at a time
 * (`readRowGroups`) so that an hour's files never have to fit in memory at once.
 */
import { parquetMetadataAsync, parquetReadObjects, type AsyncBuffer } from "hyparquet";
import { ByteWriter, ParquetWriter } from "hyparquet-writer";
import type { SchemaElement } from "hyparquet";
import { LAKE_TABLES, type Column, type LakeRow, type LakeTable } from "../../protocol/lake.js";

const WRITER = "sextant lake";

function schemaOf(columns: readonly Column[]): SchemaElement[] {
  const root: SchemaElement = { name: "root", num_children: columns.length };
  return [
    root,
    ...columns.map((col): SchemaElement => {
      const element: SchemaElement = { name: col.name, repetition_type: "OPTIONAL", type: "BYTE_ARRAY" };
      switch (col.type) {
        case "STRING":
          return { ...element, type: "BYTE_ARRAY", converted_type: "UTF8" };
        case "TIMESTAMP":
          return {
            ...element,
            type: "INT64",
            converted_type: "TIMESTAMP_MILLIS",
            logical_type: { type: "TIMESTAMP", isAdjustedToUTC: true, unit: "MILLIS" },
          };
        case "INT32":
          return { ...element, type: "INT32" };
        case "DOUBLE":
          return { ...element, type: "DOUBLE" };
        case "BOOLEAN":
          return { ...element, type: "BOOLEAN" };
      }
    }),
  ];
}

/** A value as the column takes it: wrong types become null rather than a corrupt file. */
function cell(col: Column, value: unknown): unknown {
  if (value === null || value === undefined) return null;
  switch (col.type) {
    case "STRING":
      return typeof value === "string" ? value : null;
    case "TIMESTAMP":
      if (value instanceof Date) return value.getTime();
      return typeof value === "number" && Number.isFinite(value) ? Math.trunc(value) : null;
    case "INT32":
      return typeof value === "number" && Number.isInteger(value) && Math.abs(value) < 2 ** 31 ? value : null;
    case "DOUBLE":
      return typeof value === "number" && Number.isFinite(value) ? value : null;
    case "BOOLEAN":
      return typeof value === "boolean" ? value : null;
  }
}

function columnData(columns: readonly Column[], rows: readonly LakeRow[]) {
  return columns.map((col) => ({ name: col.name, data: rows.map((row) => cell(col, row[col.name])) }));
}

/** Rows per row group: large enough to compress well, small enough to read a group at a time. */
export const ROW_GROUP_ROWS = 50_000;

/** Assembles one Parquet file from successive batches of rows. */
export class ParquetAssembler {
  private readonly bytes = new ByteWriter();
  private readonly writer: ParquetWriter;
  private readonly columns: readonly Column[];
  private pending: LakeRow[] = [];
  rows = 0;

  constructor(table: LakeTable) {
    this.columns = LAKE_TABLES[table].columns;
    this.writer = new ParquetWriter({ writer: this.bytes, schema: schemaOf(this.columns), createdBy: WRITER });
  }

  add(rows: readonly LakeRow[]): void {
    for (const row of rows) this.pending.push(row);
    this.rows += rows.length;
    if (this.pending.length >= ROW_GROUP_ROWS) this.flush();
  }

  /** Bytes written so far (row groups already encoded). */
  get size(): number {
    return this.bytes.offset;
  }

  private flush(): void {
    if (this.pending.length === 0) return;
    void this.writer.write({ columnData: columnData(this.columns, this.pending), rowGroupSize: ROW_GROUP_ROWS });
    this.pending = [];
  }

  finish(): ArrayBuffer {
    this.flush();
    this.writer.finish();
    return this.bytes.getBuffer();
  }
}

/** One Parquet file of `rows`. */
export function encodeRows(table: LakeTable, rows: readonly LakeRow[]): ArrayBuffer {
  const file = new ParquetAssembler(table);
  file.add(rows);
  return file.finish();
}

/** A Parquet file's rows, a row group at a time; timestamps come back as milliseconds. */
export async function* readRowGroups(file: AsyncBuffer): AsyncGenerator<LakeRow[]> {
  const metadata = await parquetMetadataAsync(file);
  let start = 0;
  for (const group of metadata.row_groups) {
    const end = start + Number(group.num_rows);
    const rows = await parquetReadObjects({ file, metadata, rowStart: start, rowEnd: end });
    for (const row of rows)
      for (const [name, value] of Object.entries(row)) {
        if (value instanceof Date) row[name] = value.getTime();
        else if (typeof value === "bigint") row[name] = Number(value);
      }
    yield rows as LakeRow[];
    start = end;
  }
}
