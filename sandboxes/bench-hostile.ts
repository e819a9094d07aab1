/**
 * Sandbox tasks of several orgs on one host, one org hostile: its tasks read FIFOs, diff rewritten
 * megabyte files, flood their disk and memory, fork without end, burn CPU and swap symlinks under the
 * file tools, in turn, for the whole run. The others run a benign task over and over (a fixture
 * uploaded, read, edited, grepped, its `npm test` run, its diff taken). The host runs in a process of
 * its own, as deployed. First the benign tasks run without the attacker, for baselines in the same run:
 * one task per org ("alone"), then as many as under attack ("loaded").
 *
 *   npx tsx sandboxes/bench-hostile.ts [--seconds 600] [--orgs 4] [--tasks 16] [--driver bubblewrap|direct]
 *
 * It prints the benign calls' latency under attack against both baselines (medians, p90s, ratios),
 * how many benign tasks finished of those started, the escapes (anything written in a directory the
 * attacker aims its links at), the wedges (a benign request unanswered for 60 s, or failed), and the
 * host's peak memory. `runHostileBench` is the same for a test's smoke run.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

export interface HostileBenchOptions {
  seconds: number;
  orgs: number;
  tasks: number;
  driver: "bubblewrap" | "direct";
}

export interface HostileBenchResult {
  options: HostileBenchOptions;
  isolation: unknown;
  alone: { create: number[]; call: number[] };
  /** The benign tasks as many as under attack, with no attacker. */
  loaded: { create: number[]; call: number[] };
  attacked: { create: number[]; call: number[] };
  benignStarted: number;
  benignFinished: number;
  attacks: Record<string, number>;
  escapes: string[];
  wedges: string[];
  hostPeakRssMiB: number;
}

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const WEDGE_MS = 60_000;

interface Host {
  url: string;
  token: string;
  child: ChildProcess;
  isolation: unknown;
}

async function startHost(driver: string, root: string): Promise<Host> {
  const token = `bench-${crypto.randomUUID()}`;
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "sandboxes/main.ts", "--port", "0", "--root", root, "--driver", driver],
    {
      cwd: ROOT,
      env: { ...process.env, SANDBOX_TOKEN: token },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`the sandbox host exited (${code})`)));
  });
  const started = JSON.parse(line) as { url: string; isolation: unknown };
  return { url: started.url, token, child, isolation: started.isolation };
}

class Client {
  constructor(private readonly host: Host) {}

  async request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
    const response = await fetch(`${this.host.url}/v1/sandboxes${path}`, {
      method,
      headers: {
        Authorization: `Bearer ${this.host.token}`,
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(WEDGE_MS * 5),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  }

  private calls = 0;
  call(id: string, tool: string, args: unknown) {
    return this.request("POST", `/${id}/calls/c${++this.calls}`, { tool, args });
  }

  upload(id: string, files: Record<string, string>) {
    return this.request("POST", `/${id}/files`, {
      files: Object.entries(files).map(([path, text]) => ({ path, content: Buffer.from(text).toString("base64") })),
    });
  }
}

const FIXTURE: Record<string, string> = {
  "package.json": JSON.stringify({ name: "fixture", version: "1.0.0", scripts: { test: "node --test" } }),
  "src/sum.js": "exports.sum = (a, b) => a + b;\n",
  "sum.test.js":
    "const test = require('node:test');\nconst assert = require('node:assert');\nconst { sum } = require('./src/sum.js');\ntest('sum', () => assert.equal(sum(1, 2), 3));\n",
};

/** One benign task, start to end; each request's latency goes to `record`. False if any step failed. */
async function benignTask(
  client: Client,
  id: string,
  tenant: string,
  record: { create: number[]; call: number[] },
  wedges: string[],
): Promise<boolean> {
  const step = async (
    what: string,
    kind: "create" | "call" | "other",
    fn: () => Promise<{ status: number; body: any }>,
  ) => {
    const started = performance.now();
    const r = await fn().catch((err: Error) => ({ status: 0, body: { error: err.message } }));
    const ms = performance.now() - started;
    if (kind !== "other") record[kind].push(ms);
    const failed = r.status < 200 || r.status >= 300 || (r.body && r.body.ok === false);
    if (ms > WEDGE_MS || failed)
      wedges.push(`${id} ${what}: ${r.status} in ${Math.round(ms)} ms ${JSON.stringify(r.body).slice(0, 200)}`);
    return !failed;
  };
  const steps: [string, "create" | "call" | "other", () => Promise<{ status: number; body: any }>][] = [
    ["create", "create", () => client.request("POST", "", { id, tenant })],
    ["upload", "other", () => client.upload(id, FIXTURE)],
    ["read_file", "call", () => client.call(id, "read_file", { path: "src/sum.js" })],
    [
      "edit_file",
      "call",
      () => client.call(id, "edit_file", { path: "src/sum.js", oldText: "a + b", newText: "b + a" }),
    ],
    ["grep", "call", () => client.call(id, "grep", { pattern: "sum" })],
    ["list_dir", "call", () => client.call(id, "list_dir", { depth: 2 })],
    ["npm test", "other", () => client.call(id, "run_terminal", { command: "npm test", timeoutMs: 120_000 })],
    ["diff", "other", () => client.request("GET", `/${id}/diff`)],
    ["delete", "other", () => client.request("DELETE", `/${id}`)],
  ];
  for (const [what, kind, fn] of steps) if (!(await step(what, kind, fn))) return false;
  return true;
}

/** The attacks, each one round of what a hostile task does. */
function attacks(client: Client, outside: string): Record<string, (id: string) => Promise<unknown>> {
  const run = (id: string, command: string, timeoutMs = 20_000) =>
    client.call(id, "run_terminal", { command, timeoutMs });
  const lines = (tag: string) => Array.from({ length: 40_000 }, (_, i) => `${tag} ${i} ${i * 7919}`).join("\n");
  return {
    fifos: async (id) => {
      await run(id, "rm -f p*; mkfifo p1 p2 p3 p4 p5 p6 p7 p8");
      await Promise.all([
        ...[1, 2, 3, 4, 5, 6, 7, 8].map((n) => client.call(id, "read_file", { path: `p${n}` })),
        client.call(id, "grep", { pattern: "x" }),
        client.request("GET", `/${id}/diff`),
      ]);
    },
    "huge diffs": async (id) => {
      await client.upload(id, { "a.lock": lines("old"), "b.lock": lines("old"), "c.lock": lines("old") });
      await run(id, "for f in a b c; do seq 1 60000 | sed 's/^/new /' > $f.lock; done");
      await client.request("GET", `/${id}/diff`);
    },
    "disk flood": (id) =>
      run(
        id,
        "head -c 200000000 /dev/zero > big; for i in $(seq 1 50); do head -c 4000000 /dev/zero > /tmp/t$i; done; rm -f big /tmp/t*",
      ),
    "memory flood": (id) =>
      run(
        id,
        `for i in 1 2 3 4 5 6; do node -e "Buffer.allocUnsafe(256 << 20).fill(1); setTimeout(() => {}, 3000)" & done; wait`,
      ),
    "fork bomb": (id) => run(id, "b() { b | b & }; b; sleep 4", 5_000),
    "cpu burn": (id) =>
      run(id, "for i in 1 2 3 4 5 6 7 8; do timeout 5 sh -c 'while :; do :; done' & done; wait", 10_000),
    "symlink swaps": async (id) => {
      const swapping = run(
        id,
        `end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do rm -rf d; mkdir d; rm -rf d; ln -s ${outside} d; done; rm -rf d`,
      );
      const writes = Array.from({ length: 200 }, (_, i) =>
        client.call(id, "create_file", { path: `d/x-${i}-${Math.random().toString(36).slice(2)}`, content: "escaped" }),
      );
      await Promise.all([swapping, ...writes]);
    },
  };
}

/** The host process's peak resident memory so far, in MiB (the kernel keeps the peak: VmHWM). */
function hostPeakMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

export async function runHostileBench(options: HostileBenchOptions): Promise<HostileBenchResult> {
  const root = mkdtempSync(join(tmpdir(), "sextant-bench-hostile-"));
  const outside = mkdtempSync(join(tmpdir(), "sextant-bench-outside-"));
  writeFileSync(join(outside, "keep.txt"), "the host's\n");
  const host = await startHost(options.driver, root);
  const client = new Client(host);
  const perOrg = Math.max(1, Math.floor(options.tasks / options.orgs));
  const benignOrgs = Array.from({ length: options.orgs - 1 }, (_, i) => `benign-org-${i}`);
  const wedges: string[] = [];
  let serial = 0;
  try {
    // Without the attacker: the benign orgs' tasks one at a time per org ("alone"), then as many as
    // under attack ("loaded"), each for a quarter of the run (at most 30 s).
    const baseline = async (tasksPerOrg: number, prefix: string) => {
      const record = { create: [] as number[], call: [] as number[] };
      const until = performance.now() + Math.min(30, options.seconds / 4) * 1000;
      await Promise.all(
        benignOrgs.flatMap((tenant) =>
          Array.from({ length: tasksPerOrg }, async () => {
            while (performance.now() < until)
              await benignTask(client, `${prefix}-${String(++serial).padStart(6, "0")}`, tenant, record, wedges);
          }),
        ),
      );
      return record;
    };
    const alone = await baseline(1, "benign-alone");
    const loaded = await baseline(perOrg, "benign-loaded");

    const attacked = { create: [] as number[], call: [] as number[] };
    const until = performance.now() + options.seconds * 1000;
    let started = 0;
    let finished = 0;
    const counts: Record<string, number> = {};
    const hostile = Array.from({ length: perOrg }, async (_, n) => {
      const id = `hostile-task-${n}`;
      await client.request("POST", "", {
        id,
        tenant: "hostile-org-0",
        limits: { diskBytes: 64 * 2 ** 20, memoryBytes: 512 * 2 ** 20, pids: 128, commandTimeoutMs: 20_000 },
      });
      const kinds = Object.entries(attacks(client, outside));
      for (let i = n; performance.now() < until; i++) {
        const [name, attack] = kinds[i % kinds.length]!;
        await attack(id).catch(() => undefined);
        counts[name] = (counts[name] ?? 0) + 1;
      }
      await client.request("DELETE", `/${id}`);
    });
    const benign = benignOrgs.flatMap((tenant) =>
      Array.from({ length: perOrg }, async () => {
        while (performance.now() < until) {
          started++;
          if (await benignTask(client, `benign-task-${String(++serial).padStart(6, "0")}`, tenant, attacked, wedges))
            finished++;
        }
      }),
    );
    await Promise.all([...hostile, ...benign]);
    const escapes = readdirSync(outside).filter((name) => name !== "keep.txt");
    return {
      options,
      isolation: host.isolation,
      alone,
      loaded,
      attacked,
      benignStarted: started,
      benignFinished: finished,
      attacks: counts,
      escapes,
      wedges,
      hostPeakRssMiB: hostPeakMiB(host.child.pid!),
    };
  } finally {
    host.child.kill("SIGTERM");
    await new Promise((r) => host.child.once("exit", r));
    rmSync(root, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
  }
}

const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
};

export function reportHostileBench(r: HostileBenchResult): string {
  const row = (name: string, base: string, alone: number[], attacked: number[]) => {
    const [a50, a90, b50, b90] = [
      quantile(alone, 0.5),
      quantile(alone, 0.9),
      quantile(attacked, 0.5),
      quantile(attacked, 0.9),
    ];
    return `${name}: ${base} p50 ${a50.toFixed(1)} ms p90 ${a90.toFixed(1)} ms (n=${alone.length}); under attack p50 ${b50.toFixed(1)} ms p90 ${b90.toFixed(1)} ms (n=${attacked.length}); ratio p50 ${(b50 / a50).toFixed(2)}x p90 ${(b90 / a90).toFixed(2)}x`;
  };
  return [
    `machine: ${availableParallelism()} cores (${cpus()[0]?.model.trim()}), driver ${r.options.driver}, isolation ${JSON.stringify(r.isolation)}`,
    `${r.options.tasks} tasks from ${r.options.orgs} orgs for ${r.options.seconds} s, one org hostile`,
    row("sandbox creation", "alone", r.alone.create, r.attacked.create),
    row("tool calls", "alone", r.alone.call, r.attacked.call),
    row("sandbox creation", "as loaded without the attacker", r.loaded.create, r.attacked.create),
    row("tool calls", "as loaded without the attacker", r.loaded.call, r.attacked.call),
    `benign tasks finished: ${r.benignFinished} of ${r.benignStarted}`,
    `attacks: ${Object.entries(r.attacks)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}`,
    `escapes: ${r.escapes.length}`,
    `wedges: ${r.wedges.length}${r.wedges.length ? ` (${r.wedges.slice(0, 3).join("; ")})` : ""}`,
    `host peak memory: ${r.hostPeakRssMiB.toFixed(0)} MiB`,
  ].join("\n");
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string", default: "600" },
      orgs: { type: "string", default: "4" },
      tasks: { type: "string", default: "16" },
      driver: { type: "string", default: "bubblewrap" },
    },
  });
  const result = await runHostileBench({
    seconds: Number(values.seconds),
    orgs: Number(values.orgs),
    tasks: Number(values.tasks),
    driver: values.driver === "direct" ? "direct" : "bubblewrap",
  });
  console.log(reportHostileBench(result));
  process.exit(
    result.escapes.length === 0 && result.wedges.length === 0 && result.benignFinished === result.benignStarted ? 0 : 1,
  );
}
