import type { Command } from "commander";
import { UsageDay, UsageDimension, type UsageReport, type UsageRow } from "../../../protocol/schemas.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import { printJson, printTable } from "../output.js";

/** The table column of each dimension a report can be grouped by. */
const COLUMNS: Record<UsageDimension, [header: string, cell: (row: UsageRow) => string | undefined]> = {
  day: ["day", (r) => r.day],
  model: ["model", (r) => r.model],
  key: ["key", (r) => r.keyId],
  user: ["user", (r) => r.userId],
};

const number = (n: number) => n.toLocaleString("en-US");

/** `--by day,model` as dimensions, refused here rather than by the edge so the message names the flag. */
export function parseDimensions(value: string): UsageDimension[] {
  const names = [...new Set(value.split(",").map((d) => d.trim()))].filter(Boolean);
  const bad = names.filter((d) => !UsageDimension.safeParse(d).success);
  if (bad.length > 0 || names.length === 0) {
    throw new UsageError(`--by takes a comma list of ${UsageDimension.options.join(", ")}, not "${value}".`);
  }
  return names as UsageDimension[];
}

export function parseDay(flag: string, value: string | undefined): string | undefined {
  if (value !== undefined && !UsageDay.safeParse(value).success) {
    throw new UsageError(`${flag} takes a UTC day as YYYY-MM-DD, not "${value}".`);
  }
  return value;
}

/** The report as a table, one column per dimension it was grouped by, with the totals last. */
export function printUsage(report: UsageReport): void {
  process.stdout.write(`Usage from ${report.from} to ${report.to} (UTC), by ${report.groupBy.join(", ")}\n\n`);
  printTable(report.rows, [
    ...report.groupBy.map((d) => COLUMNS[d]),
    ["requests", (r) => number(r.requests)],
    ["prompt", (r) => number(r.promptTokens)],
    ["completion", (r) => number(r.completionTokens)],
    ["total", (r) => number(r.totalTokens)],
  ]);
  const t = report.totals;
  process.stdout.write(
    `\nTotal: ${number(t.requests)} requests, ${number(t.totalTokens)} tokens ` +
      `(${number(t.promptTokens)} prompt, ${number(t.completionTokens)} completion)\n`,
  );
}

export function usage(program: Command): void {
  program
    .command("usage")
    .description("Model tokens metered by the gateway, per UTC day (owners see the org, members their own)")
    .option("--from <day>", "first UTC day, YYYY-MM-DD (default: 29 days before --to)")
    .option("--to <day>", "last UTC day, YYYY-MM-DD (default: today)")
    .option("--by <dimensions>", "group by a comma list of day, model, key, user", "day,model")
    .action(async (opts: { from?: string; to?: string; by: string }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const from = parseDay("--from", opts.from);
      const to = parseDay("--to", opts.to);
      const groupBy = parseDimensions(opts.by);
      const report = await (await client(options)).sextant.usage({ from, to, groupBy });
      if (options.json) return printJson(report);
      printUsage(report);
    });
}
