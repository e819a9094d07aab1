import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { Command, Option } from "commander";
import { LakeHour, LAKE_TABLES, type LakeTable } from "../../../protocol/lake.js";
import { adminClient, UsageError, type GlobalOptions } from "../context.js";
import { printJson, printTable } from "../output.js";
import { parseDay } from "./usage.js";

const globals = (cmd: Command) => cmd.optsWithGlobals<GlobalOptions>();
const TABLES = Object.keys(LAKE_TABLES) as LakeTable[];

const day = (value: string) => parseDay("--day", value)!;

function hour(value: string): string {
  const padded = value.padStart(2, "0");
  if (!LakeHour.safeParse(padded).success) throw new UsageError(`--hour takes an hour, 0 to 23, not "${value}".`);
  return padded;
}

const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

/** `sextant admin lake`: the lake's partitions, a day's Parquet files to a directory, compaction now. */
export function lakeCommands(admin: Command): void {
  const lake = admin.command("lake").description("The lake: editor events and the edge's request records, as Parquet");

  lake
    .command("ls")
    .description("A day's partitions of a table: each hour's files and rows")
    .addOption(new Option("--table <table>", "the table").choices(TABLES).default("editor_events"))
    .requiredOption("--day <day>", "the UTC day, YYYY-MM-DD", day)
    .action(async (opts: { table: LakeTable; day: string }, cmd: Command) => {
      const listed = await (await adminClient(globals(cmd))).lake.partitions(opts.table, opts.day);
      if (globals(cmd).json) return printJson(listed);
      printTable(listed.partitions, [
        ["hour", (p) => p.hour],
        ["rows", (p) => String(p.rows)],
        ["files", (p) => String(p.files.length)],
        ["size", (p) => kib(p.files.reduce((n, f) => n + f.bytes, 0))],
        ["compacted", (p) => p.compactedAt?.replace("T", " ").slice(0, 16) ?? "not yet"],
      ]);
    });

  lake
    .command("export")
    .description(
      "Download a day's Parquet files (every table unless --table) into <out>/<table>/day=…/hour=…/, for DuckDB or pandas",
    )
    .requiredOption("--day <day>", "the UTC day, YYYY-MM-DD", day)
    .addOption(new Option("--table <table>", "one table only").choices(TABLES))
    .option("--hour <hour>", "one hour only", hour)
    .option("--out <dir>", "where to write the files", "lake")
    .action(async (opts: { day: string; table?: LakeTable; hour?: string; out: string }, cmd: Command) => {
      const admin = await adminClient(globals(cmd));
      const written: { key: string; path: string; rows: number; bytes: number }[] = [];
      for (const table of opts.table ? [opts.table] : TABLES) {
        const { partitions } = await admin.lake.partitions(table, opts.day);
        for (const partition of partitions) {
          if (opts.hour && partition.hour !== opts.hour) continue;
          for (const file of partition.files) {
            const path = resolve(opts.out, file.key.replace(/^lake\//, ""));
            mkdirSync(dirname(path), { recursive: true });
            writeFileSync(path, await admin.lake.file(file.key));
            written.push({ key: file.key, path, rows: file.rows, bytes: file.bytes });
          }
        }
      }
      if (globals(cmd).json) return printJson({ out: resolve(opts.out), files: written });
      const rows = written.reduce((n, f) => n + f.rows, 0);
      process.stdout.write(
        `Wrote ${written.length} Parquet file${written.length === 1 ? "" : "s"} (${rows} rows) under ${resolve(opts.out)}.\n` +
          (written.length
            ? `Query them with DuckDB: SELECT type, count(*) FROM read_parquet('${join(resolve(opts.out), "editor_events", "**", "*.parquet")}', hive_partitioning = true) GROUP BY type;\n`
            : ""),
      );
    });

  lake
    .command("compact")
    .description("Fold one partition's files into one now, rather than at its scheduled time")
    .addOption(new Option("--table <table>", "the table").choices(TABLES).default("editor_events"))
    .requiredOption("--day <day>", "the UTC day, YYYY-MM-DD", day)
    .requiredOption("--hour <hour>", "the hour, 0 to 23", hour)
    .action(async (opts: { table: LakeTable; day: string; hour: string }, cmd: Command) => {
      const result = await (await adminClient(globals(cmd))).lake.compact(opts);
      if (globals(cmd).json) return printJson(result);
      process.stdout.write(
        result.compacted
          ? `Compacted ${opts.table} ${opts.day} ${opts.hour}:00 into ${result.files} file${result.files === 1 ? "" : "s"} (${result.rows} rows).\n`
          : `${opts.table} ${opts.day} ${opts.hour}:00 is already ${result.files} file${result.files === 1 ? "" : "s"} (${result.rows} rows).\n`,
      );
    });
}
