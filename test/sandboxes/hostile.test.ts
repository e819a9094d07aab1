/**
 * One org's hostile task beside another org's benign one, at the host's own API (under `direct`,
 * the driver where a task's commands reach the host's filesystem): FIFOs, a diff of rewritten
 * files, and symlinks swapped under the file tools. The benign task's calls must all answer while
 * the attacker does its worst, and nothing may be written outside the attacker's tree.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxHost } from "../../sandboxes/host.js";
import { callId, useHost } from "./harness.js";

const host = useHost({ driver: "direct" });
const ATTACKER = "hostile-attacker";
const VICTIM = "hostile-victim";

const run = async (id: string, command: string, timeoutMs = 60_000) => {
  const r = await host.call(id, callId(), "run_terminal", { command, timeoutMs });
  if (!r.ok) throw new Error(JSON.stringify(r.error));
  return r.result as { exitCode: number | null; stdout: string; stderr: string };
};

/** What another org's task does meanwhile: a sandbox made, a file written and read back. */
async function victimWorks(round: number): Promise<void> {
  const id = `hostile-victim-${round}`;
  await host.create(id, { tenant: "org-victim-0001" });
  const created = await host.call(id, callId(), "create_file", { path: "a.txt", content: `round ${round}\n` });
  expect(created.ok).toBe(true);
  const read = await host.call(id, callId(), "read_file", { path: "a.txt" });
  expect(read).toMatchObject({ ok: true, result: { content: `round ${round}\n` } });
  expect((await host.request("DELETE", `/v1/sandboxes/${id}`)).status).toBe(204);
}

let outside: string;
beforeAll(async () => {
  await host.create(ATTACKER, { tenant: "org-attacker-01" });
  await host.create(VICTIM, { tenant: "org-victim-0001" });
  await host.upload(VICTIM, { "main.py": "print('hello')\n" });
  // A directory outside every tree, owned by root, that the attacker aims its links at.
  outside = mkdtempSync(join(tmpdir(), "sextant-outside-"));
  writeFileSync(join(outside, "keep.txt"), "root's\n");
});
afterAll(() => rmSync(outside, { recursive: true, force: true }));

describe("a hostile task beside another org's", () => {
  it("answers file tools on FIFOs at once, and the host keeps serving others meanwhile", async () => {
    await run(ATTACKER, "mkfifo p1 p2 p3 p4 p5 p6 p7 p8");
    // More blocked opens than libuv has threads would wedge every fs operation of the host.
    const attacks = [
      ...["p1", "p2", "p3", "p4", "p5"].map((path) => host.call(ATTACKER, callId(), "read_file", { path })),
      host.call(ATTACKER, callId(), "edit_file", { path: "p6", oldText: "a", newText: "b" }),
      host.call(ATTACKER, callId(), "grep", { pattern: "no such text anywhere" }),
      host.request("POST", `/v1/sandboxes/${ATTACKER}/files`, {
        files: [{ path: "p7", content: Buffer.from("x").toString("base64") }],
      }),
      host.request("GET", `/v1/sandboxes/${ATTACKER}/diff`),
    ];
    await victimWorks(1);
    const answers = await Promise.all(attacks);
    for (const a of answers.slice(0, 6)) expect(a).toMatchObject({ ok: false, error: { code: "not_regular" } });
    expect(answers[6]).toMatchObject({ ok: true, result: { matches: [] } });
    // An upload replaces what is at its path, a FIFO included, without opening it.
    expect(answers[7]).toMatchObject({ status: 200 });
    expect(answers[8]).toMatchObject({ status: 200 });
    await victimWorks(2);
  });

  it("diffs rewritten megabyte files without holding the host, as whole replacements git applies", async () => {
    const lines = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `${tag} ${i} ${i * 7919}`).join("\n");
    const files: Record<string, string> = {};
    for (const name of ["lock-a.json", "lock-b.json", "lock-c.json"]) files[name] = lines("old", 40_000) + "\n";
    await host.upload(ATTACKER, files);
    await run(ATTACKER, `for f in lock-a.json lock-b.json lock-c.json; do seq 1 40000 | sed 's/^/new /' > $f; done`);
    const diff = host.request("GET", `/v1/sandboxes/${ATTACKER}/diff`);
    await victimWorks(3);
    const answer = await diff;
    expect(answer.status).toBe(200);
    expect(answer.body.filesChanged).toBeGreaterThanOrEqual(3);
    expect(answer.body.insertions).toBeGreaterThanOrEqual(120_000);
    // The diff applies to the files as uploaded, giving the files as they are now.
    const copy = mkdtempSync(join(tmpdir(), "sextant-apply-"));
    try {
      for (const [name, text] of Object.entries(files)) writeFileSync(join(copy, name), text);
      writeFileSync(join(copy, "change.diff"), answer.body.diff);
      execFileSync("git", ["apply", "--include=lock-*", "change.diff"], { cwd: copy });
      for (const name of Object.keys(files))
        expect(readFileSync(join(copy, name), "utf8")).toBe(
          readFileSync(join(host.root, ATTACKER, "disk", "tree", name), "utf8"),
        );
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  it("writes nothing outside the tree however its symlinks are swapped under the file tools", async () => {
    // The attacker's own command swaps `d` between a directory and a link out, as fast as it can.
    const swapping = run(
      ATTACKER,
      `end=$(($(date +%s) + 4)); while [ $(date +%s) -lt $end ]; do rm -rf d; mkdir d; rm -rf d; ln -s ${outside} d; done; rm -rf d`,
      30_000,
    );
    const calls: Promise<unknown>[] = [];
    for (let i = 0; i < 300; i++) {
      calls.push(host.call(ATTACKER, callId(), "create_file", { path: `d/created-${i}.txt`, content: "escaped\n" }));
      calls.push(host.call(ATTACKER, callId(), "create_file", { path: `d/deep/${i}/x.txt`, content: "escaped\n" }));
      if (i % 20 === 0) await new Promise((r) => setTimeout(r, 5));
    }
    await Promise.all(calls);
    await swapping;
    // Some calls met a directory and wrote into the tree, the rest were refused: none escaped.
    expect(readdirSync(outside)).toEqual(["keep.txt"]);
    expect(statSync(outside).uid).toBe(process.getuid!());
  });

  it("refuses a link out of the tree, and a hard link to a file it does not own", async () => {
    await run(ATTACKER, `ln -s ${outside} out; ln -s ${join(outside, "keep.txt")} keep`);
    for (const [tool, args] of [
      ["read_file", { path: "keep" }],
      ["read_file", { path: "out/keep.txt" }],
      ["create_file", { path: "out/new.txt", content: "x" }],
      ["edit_file", { path: "keep", oldText: "root", newText: "mine" }],
      ["list_dir", { path: "out" }],
      ["grep", { pattern: "root", path: "out" }],
    ] as const) {
      const r = await host.call(ATTACKER, callId(), tool, args);
      expect(r, tool).toMatchObject({ ok: false, error: { code: "outside_tree" } });
    }
    expect(readdirSync(outside)).toEqual(["keep.txt"]);
  });
});

describe("the host's fair share", () => {
  const small = useHost({ driver: "direct", capacity: { sandboxes: 4, diskBytes: 64 * 2 ** 20, tenantShare: 0.5 } });
  const make = (id: string, tenant: string, diskBytes = 2 ** 20) =>
    small.request("POST", "/v1/sandboxes", { id, tenant, limits: { diskBytes } });

  it("holds one tenant to its share of the host's sandboxes, and leaves the rest to others", async () => {
    expect((await make("share-a-0001", "tenant-aaaa")).status).toBe(201);
    expect((await make("share-a-0002", "tenant-aaaa")).status).toBe(201);
    const third = await make("share-a-0003", "tenant-aaaa");
    expect(third).toMatchObject({ status: 429, body: { code: "busy" } });
    expect((await make("share-b-0001", "tenant-bbbb")).status).toBe(201);
    expect((await make("share-b-0002", "tenant-bbbb")).status).toBe(201);
    // The host is full: a third tenant waits too, until a sandbox ends.
    expect(await make("share-c-0001", "tenant-cccc")).toMatchObject({ status: 429, body: { code: "busy" } });
    expect((await small.request("DELETE", "/v1/sandboxes/share-a-0001")).status).toBe(204);
    expect((await make("share-c-0001", "tenant-cccc")).status).toBe(201);
    for (const id of ["share-a-0002", "share-b-0001", "share-b-0002", "share-c-0001"])
      await small.request("DELETE", `/v1/sandboxes/${id}`);
  });
});

describe("the host's fair share of disk", () => {
  const small = useHost({ driver: "direct", capacity: { sandboxes: 16, diskBytes: 64 * 2 ** 20, tenantShare: 0.5 } });
  const make = (id: string, tenant: string, diskBytes = 2 ** 20) =>
    small.request("POST", "/v1/sandboxes", { id, tenant, limits: { diskBytes } });

  it.runIf(process.getuid?.() === 0 || process.env.CI)(
    "holds one tenant to its share of the disk its sandboxes hold",
    async () => {
      expect((await make("disk-a-0001", "tenant-dddd", 40 * 2 ** 20)).status).toBe(201);
      // An empty sandbox takes nothing: a second is let in.
      expect((await make("disk-a-0002", "tenant-dddd")).status).toBe(201);
      const filled = await small.call("disk-a-0001", callId(), "run_terminal", {
        command: "head -c 34000000 /dev/zero > fill && echo filled",
      });
      expect(filled).toMatchObject({ ok: true, result: { stdout: "filled\n" } });
      // 34 MB held, past its share of 32 MiB: no more for it, while another tenant is let in.
      expect(await make("disk-a-0003", "tenant-dddd")).toMatchObject({ status: 429, body: { code: "busy" } });
      expect((await make("disk-e-0001", "tenant-eeee")).status).toBe(201);
      expect((await small.request("DELETE", "/v1/sandboxes/disk-a-0001")).status).toBe(204);
      expect((await make("disk-a-0003", "tenant-dddd")).status).toBe(201);
    },
  );
});

describe.runIf(process.getuid?.() === 0 || process.env.CI)("the host's fair share of memory", () => {
  const small = useHost({ driver: "direct", capacity: { memoryBytes: 320 * 2 ** 20, tenantShare: 0.5 } });
  // Fills 100 MiB and holds it for 3 s: two at once overlap whatever the machine's pace.
  const hold = (id: string) =>
    small.call(id, callId(), "run_terminal", {
      command: `node -e "const b = Buffer.allocUnsafe(100 << 20).fill(1); setTimeout(() => console.log('held', b.length), 3000)"`,
      timeoutMs: 60_000,
    });

  it("holds one tenant's sandboxes together to its share of the memory, and leaves the rest to others", async () => {
    for (const [id, tenant] of [
      ["memory-a-0001", "tenant-mmmm"],
      ["memory-a-0002", "tenant-mmmm"],
      ["memory-b-0001", "tenant-nnnn"],
    ] as const)
      await small.create(id, { tenant, limits: { memoryBytes: 150 * 2 ** 20 } });
    // Each sandbox's 100 MiB is under its own cap of 150; tenant mmmm's two make 200, past its 160.
    const [a1, a2, b1] = await Promise.all([hold("memory-a-0001"), hold("memory-a-0002"), hold("memory-b-0001")]);
    const held = (r: { result: { stdout: string } }) => r.result.stdout.startsWith("held");
    expect([held(a1), held(a2)]).not.toEqual([true, true]);
    expect(held(b1)).toBe(true);
  });
});

describe.runIf(process.getuid?.() === 0 || process.env.CI)("a host killed before it could clean up", () => {
  it("leaves no mount and no control group past the next host's start", async () => {
    const root = mkdtempSync(join(tmpdir(), "sextant-killed-host-"));
    const token = "killed-host-token-0123456789";
    const child = spawn(process.execPath, ["--import", "tsx", "sandboxes/main.ts", "--port", "0", "--root", root], {
      env: { ...process.env, SANDBOX_TOKEN: token },
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      const { url } = JSON.parse(
        await new Promise<string>((r) => createInterface({ input: child.stdout! }).once("line", r)),
      );
      const made = await fetch(`${url}/v1/sandboxes`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: JSON.stringify({ id: "killed-host-0001" }),
      });
      expect(made.status).toBe(201);
      const mounted = () => readFileSync("/proc/self/mountinfo", "utf8").includes(`sextant-${child.pid} `);
      const groups = () =>
        readFileSync("/proc/self/cgroup", "utf8")
          .split("\n")
          .filter((l) => /:(memory|pids):/.test(l))
          .map((l) => join("/sys/fs/cgroup", l.split(":")[1]!, l.split(":")[2]!, `sextant-host-${child.pid}`))
          .filter((dir) => existsSync(dir));
      expect(mounted()).toBe(true);
      expect(groups().length).toBeGreaterThan(0);
      child.kill("SIGKILL");
      await new Promise((r) => child.once("exit", r));
      // Nothing cleaned up: the next host to start does it.
      expect(mounted()).toBe(true);
      const nextRoot = mkdtempSync(join(tmpdir(), "sextant-next-host-"));
      const next = await startSandboxHost({ token, root: nextRoot, driver: "direct" });
      await next.stop();
      rmSync(nextRoot, { recursive: true, force: true });
      expect(mounted()).toBe(false);
      expect(groups()).toEqual([]);
    } finally {
      child.kill("SIGKILL");
      rmSync(root, { recursive: true, force: true });
    }
  }, 60_000);
});
