import {
  APIConnectionError,
  APIError,
  AuthenticationError,
  BadRequestError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
} from "../sdk/errors.js";
import { UsageError } from "./context.js";
import { WorkspaceNotIndexedError } from "../workspace/session.js";
import { NotADirectoryError } from "../workspace/registry.js";
import { OutsideWorkspaceError } from "../workspace/search.js";

/** Exit codes, stable so that scripts can branch on them. */
export const EXIT = {
  ok: 0,
  failure: 1,
  usage: 2,
  auth: 3,
  notFound: 4,
  unavailable: 5,
  unreachable: 6,
} as const;

const EXIT_BY_ERROR: [new (...args: never[]) => Error, number][] = [
  [UsageError, EXIT.usage],
  [NotADirectoryError, EXIT.usage],
  [OutsideWorkspaceError, EXIT.usage],
  [WorkspaceNotIndexedError, EXIT.notFound],
  [BadRequestError, EXIT.usage],
  [AuthenticationError, EXIT.auth],
  [PermissionDeniedError, EXIT.auth],
  [NotFoundError, EXIT.notFound],
  [RateLimitError, EXIT.unavailable],
  [APIConnectionError, EXIT.unreachable],
];

export function exitCodeFor(err: unknown): number {
  for (const [Class, code] of EXIT_BY_ERROR) if (err instanceof Class) return code;
  if (err instanceof APIError && err.status >= 500) return EXIT.unavailable;
  return EXIT.failure;
}

export function printError(err: unknown, json: boolean): void {
  const error = err instanceof Error ? err : new Error(String(err));
  if (json) {
    const api = error instanceof APIError ? { status: error.status, code: error.code, requestId: error.requestId } : {};
    process.stderr.write(JSON.stringify({ error: { name: error.name, message: error.message, ...api } }) + "\n");
    return;
  }
  let line = `error: ${error.message}`;
  if (error instanceof APIError) line += ` [${error.code}${error.requestId ? `, request ${error.requestId}` : ""}]`;
  process.stderr.write(line + "\n");
  if (error instanceof APIError && error.problem?.errors) {
    for (const e of error.problem.errors) process.stderr.write(`  ${e.path}: ${e.message}\n`);
  }
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + "\n");
}

export type TableColumns<T> = [header: string, cell: (row: T) => string | null | undefined][];

/** A plain aligned table, each line ending in a newline; empty cells show as "-". */
export function formatTable<T>(rows: T[], columns: TableColumns<T>): string {
  if (rows.length === 0) return "(none)\n";
  const cells = rows.map((row) => columns.map(([, cell]) => cell(row) || "-"));
  const widths = columns.map(([header], i) => Math.max(header.length, ...cells.map((r) => r[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join("  ")
      .trimEnd() + "\n";
  return [columns.map(([header]) => header.toUpperCase()), ...cells].map(line).join("");
}

export function printTable<T>(rows: T[], columns: TableColumns<T>): void {
  process.stdout.write(formatTable(rows, columns));
}

export function printFields(fields: [label: string, value: string][]): void {
  const width = Math.max(...fields.map(([label]) => label.length)) + 1;
  for (const [label, value] of fields) process.stdout.write(`${(label + ":").padEnd(width + 1)}${value}\n`);
}

/** "30d", "12h", "45m" or an ISO timestamp, as an ISO timestamp. */
export function parseExpiry(value: string, now = Date.now()): string {
  const relative = value.match(/^(\d+)([dhm])$/);
  if (relative) {
    const unit = { d: 86_400_000, h: 3_600_000, m: 60_000 }[relative[2] as "d" | "h" | "m"];
    return new Date(now + Number(relative[1]) * unit).toISOString();
  }
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw new UsageError(`--expires takes 30d, 12h, 45m or an ISO date, not "${value}".`);
  return new Date(ms).toISOString();
}

export const shortDate = (iso: string | null) => (iso ? iso.replace("T", " ").slice(0, 16) : null);
