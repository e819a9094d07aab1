/**
 * Validates a built task set the way the environments run it: each task is packed as `sextant envs
 * push` packs it and sent to a sandbox host of this process's own (bubblewrap), where its reference
 * solution must score 1 (solve.sh, then the verifier) and doing nothing must score 0 (the verifier
 * on the untouched tree). Prints one row per task and the total time; exits 1 when any task fails
 * either.
 *
 *   npx tsx bench/tasks/validate.ts [dir=bench/tasks/out] [--only id1,id2] [--concurrency 2]
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { packTaskDir } from "../../client/envs/task-archive.js";
import { findTaskDirs } from "../../client/envs/task-set.js";
import { SolveResponse, VerifyResponse } from "../../protocol/agents/sandbox.js";
import { startSandboxHost, type SandboxHost } from "../../sandboxes/host.js";

export interface Validation {
  name: string;
  oracle: number | undefined;
  noop: number | undefined;
  /** Why a run did not give its reward: the request's error, or the verifier's log tail. */
  why?: string;
  seconds: number;
}

const tail = (log: string, lines = 4) =>
  log
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)
    .slice(-lines)
    .join(" | ");

/** A client of one sandbox host, for the calls validation makes. */
class HostClient {
  private calls = 0;
  private sandboxes = 0;
  constructor(
    private readonly host: SandboxHost,
    private readonly token: string,
  ) {}

  async request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
    const response = await fetch(`${this.host.url}${path}`, {
      method,
      headers: {
        Authorization: `Bearer ${this.token}`,
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  }

  async putArchive(dir: string): Promise<string> {
    const { archive, sha256 } = await packTaskDir(dir);
    const response = await fetch(`${this.host.url}/v1/archives/${sha256}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${this.token}`, "Content-Type": "application/gzip" },
      body: archive as Uint8Array<ArrayBuffer>,
    });
    if (response.status !== 201 && response.status !== 200)
      throw new Error(`archive: ${response.status} ${await response.text()}`);
    return sha256;
  }

  /** Runs `fn` in a fresh sandbox of the task, removed after. */
  async withSandbox<T>(archive: string, fn: (id: string) => Promise<T>): Promise<T> {
    const id = `validate-${++this.sandboxes}`;
    const created = await this.request("POST", "/v1/sandboxes", { id, task: { archive } });
    if (created.status !== 201) throw new Error(`create: ${created.status} ${JSON.stringify(created.body)}`);
    try {
      return await fn(id);
    } finally {
      await this.request("DELETE", `/v1/sandboxes/${id}`).catch(() => undefined);
    }
  }

  async phase(id: string, kind: "solve" | "verify"): Promise<{ status: number; body: any }> {
    return this.request("POST", `/v1/sandboxes/${id}/${kind}/call-${++this.calls}`, {});
  }
}

async function validateTask(client: HostClient, name: string, dir: string): Promise<Validation> {
  const started = performance.now();
  const out: Validation = { name, oracle: undefined, noop: undefined, seconds: 0 };
  const why: string[] = [];
  try {
    const archive = await client.putArchive(dir);
    out.noop = await client.withSandbox(archive, async (id) => {
      const r = await client.phase(id, "verify");
      if (r.status !== 200) throw new Error(`noop verify: ${r.status} ${JSON.stringify(r.body)}`);
      const v = VerifyResponse.parse(r.body);
      if (v.reward !== 0) why.push(`noop: ${tail(v.log)}`);
      return v.reward;
    });
    out.oracle = await client.withSandbox(archive, async (id) => {
      const s = await client.phase(id, "solve");
      if (s.status !== 200) throw new Error(`solve: ${s.status} ${JSON.stringify(s.body)}`);
      const solved = SolveResponse.parse(s.body);
      if (solved.exitCode !== 0) why.push(`solve.sh exited ${solved.exitCode}: ${tail(solved.log)}`);
      const r = await client.phase(id, "verify");
      if (r.status !== 200) throw new Error(`oracle verify: ${r.status} ${JSON.stringify(r.body)}`);
      const v = VerifyResponse.parse(r.body);
      if (v.reward !== 1) why.push(`oracle: ${tail(v.log)}`);
      return v.reward;
    });
  } catch (err) {
    why.push((err as Error).message);
  }
  out.seconds = (performance.now() - started) / 1000;
  if (why.length) out.why = why.join("; ");
  return out;
}

export async function validateSet(
  root: string,
  options: { only?: string[]; concurrency?: number; onRow?: (v: Validation) => void } = {},
): Promise<Validation[]> {
  let tasks = await findTaskDirs(root);
  if (options.only) {
    const only = new Set(options.only);
    tasks = tasks.filter((t) => only.has(basename(t.dir)));
  }
  const token = randomBytes(24).toString("base64url");
  const hostRoot = mkdtempSync(join(tmpdir(), "sextant-validate-"));
  const host = await startSandboxHost({ token, root: hostRoot, driver: "bubblewrap" });
  const client = new HostClient(host, token);
  const results: Validation[] = [];
  try {
    let next = 0;
    const worker = async () => {
      while (next < tasks.length) {
        const t = tasks[next++]!;
        const v = await validateTask(client, t.name, t.dir);
        results.push(v);
        options.onRow?.(v);
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, options.concurrency ?? 2) }, worker));
  } finally {
    await host.stop();
    rmSync(hostRoot, { recursive: true, force: true });
  }
  return results.sort((a, b) => (a.name < b.name ? -1 : 1));
}

const fmt = (r: number | undefined) => (r === undefined ? "-" : String(r));

export function formatTable(rows: Validation[]): string {
  const width = Math.max(4, ...rows.map((r) => r.name.length));
  const lines = [`${"task".padEnd(width)}  oracle  noop  seconds  verdict`];
  for (const r of rows) {
    const ok = r.oracle === 1 && r.noop === 0;
    lines.push(
      `${r.name.padEnd(width)}  ${fmt(r.oracle).padStart(6)}  ${fmt(r.noop).padStart(4)}  ${r.seconds.toFixed(1).padStart(7)}  ${ok ? "ok" : `BROKEN: ${r.why ?? ""}`}`,
    );
  }
  return lines.join("\n");
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { only: { type: "string" }, concurrency: { type: "string", default: "2" } },
  });
  const root = resolve(positionals[0] ?? join(import.meta.dirname, "out"));
  const concurrency = Number(values.concurrency);
  const started = performance.now();
  const rows = await validateSet(root, {
    ...(values.only ? { only: values.only.split(",").map((s) => s.trim()) } : {}),
    concurrency,
    onRow: (v) => process.stderr.write(`${v.name}: oracle ${fmt(v.oracle)}, noop ${fmt(v.noop)}\n`),
  });
  const broken = rows.filter((r) => !(r.oracle === 1 && r.noop === 0));
  console.log(formatTable(rows));
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(
    `${rows.length} tasks, ${rows.length - broken.length} valid, ${broken.length} broken (${seconds} s, bubblewrap, ${concurrency} at once)`,
  );
  process.exit(rows.length > 0 && broken.length === 0 ? 0 : 1);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
