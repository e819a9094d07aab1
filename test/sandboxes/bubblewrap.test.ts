import { readdirSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bwrapRuns, callId, isolationTestsRun, useHost } from "./harness.js";

/** Host processes whose command line holds `marker`. */
function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, "utf8").includes(marker)) found.push(Number(name));
    } catch {
      // Gone while we looked.
    }
  }
  return found;
}

describe.skipIf(!isolationTestsRun)(
  "bubblewrap isolation (skipped outside CI: bwrap cannot make a sandbox here)",
  () => {
    it("can make a sandbox on this machine (under CI=true, its absence fails here)", () => {
      expect(bwrapRuns, "bubblewrap cannot make a sandbox: apt-get install bubblewrap").toBe(true);
    });

    const host = useHost({ driver: "bubblewrap" });
    const ID = "bwrap-sandbox";
    const run = async (command: string, timeoutMs = 60_000) => {
      const r = await host.call(ID, callId(), "run_terminal", { command, timeoutMs });
      if (!r.ok) throw new Error(JSON.stringify(r.error));
      return r.result as { exitCode: number | null; stdout: string; stderr: string; timedOut: boolean; signal: string };
    };

    let server: Server;
    let connections = 0;
    beforeAll(async () => {
      await host.create(ID, { limits: { memoryBytes: 2 * 2 ** 30, pids: 32 } });
      await host.upload(ID, { "hello.txt": "hello\n" });
      server = createServer((socket) => {
        connections++;
        socket.destroy();
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    });
    afterAll(() => new Promise((resolve) => server.close(resolve)));

    it("runs commands in the tree at /workspace, and node can run there", async () => {
      const r = await run("pwd; cat hello.txt; node -e 'console.log(6 * 7)'");
      expect(r).toMatchObject({ exitCode: 0, stdout: "/workspace\nhello\n42\n" });
    });

    it("has no network: a server on the host's loopback cannot be reached, nor the internet", async () => {
      const { port } = server.address() as { port: number };
      const connect = (hostName: string, p: number) =>
        `node -e "require('net').connect(${p}, '${hostName}').on('connect', () => { console.log('connected'); process.exit(0) }).on('error', (e) => { console.log(e.code); process.exit(3) })"`;
      const local = await run(connect("127.0.0.1", port));
      expect(local.stdout).not.toContain("connected");
      expect(local.exitCode).toBe(3);
      const remote = await run(connect("1.1.1.1", 80));
      expect(remote.stdout).not.toContain("connected");
      expect(remote.exitCode).toBe(3);
      expect(connections).toBe(0);
    });

    it("cannot write outside /workspace", async () => {
      const r = await run("touch /usr/x; touch /etc/x; touch /x; echo done");
      expect(r.stderr).toMatch(/usr\/x.*(Read-only|Permission)/);
      expect(r.stderr).toMatch(/etc\/x.*(Read-only|Permission|No such)/);
      expect(r.stdout).toBe("done\n");
    });

    it("cannot see the host's files outside its tree, another sandbox's included", async () => {
      await host.create("bwrap-other");
      await host.upload("bwrap-other", { "secret.txt": "the other sandbox's secret\n" });
      const r = await run(`ls ${host.root}; cat ${join(host.root, "bwrap-other", "disk", "tree", "secret.txt")}; ls /`);
      expect(r.stdout).not.toContain("secret");
      expect(r.stdout).not.toContain("bwrap-other");
      expect(r.stderr).toContain("No such file");
    });

    it("kills a command that allocates past its memory cap", async () => {
      const alloc = (mib: number) =>
        `node -e "const a = []; for (let i = 0; i < ${mib / 64}; i++) a.push(Buffer.allocUnsafe(64 << 20).fill(1)); console.log('allocated')"`;
      expect(await run(alloc(256))).toMatchObject({ exitCode: 0, stdout: "allocated\n" });
      const over = await run(alloc(3072));
      expect(over.exitCode).not.toBe(0);
      expect(over.stdout).not.toContain("allocated");
    });

    it("holds a command to its process cap", async () => {
      // Each started `sleep` leaves its pid; past the cap the shell cannot fork (and gives up).
      await run("for i in $(seq 1 100); do sleep 5 & echo $! >> started.txt; done");
      const counted = await run("sort -u started.txt | wc -l");
      expect(Number(counted.stdout.trim())).toBeGreaterThan(1);
      expect(Number(counted.stdout.trim())).toBeLessThan(32);
    });

    it("kills a command and every process it started at its timeout, before the call answers", async () => {
      const marker = `31.${process.pid}`;
      const r = await run(`sleep ${marker} & (sleep ${marker} &) ; sleep ${marker}`, 300);
      expect(r).toMatchObject({ timedOut: true, signal: "SIGKILL" });
      expect(processesWith(marker)).toEqual([]);
    });

    it("caps a command's output", async () => {
      const r = await run("head -c 1000000 /dev/zero | tr '\\0' a");
      expect(r).toMatchObject({ exitCode: 0, stdoutTruncated: true });
      expect(Buffer.byteLength(r.stdout)).toBeLessThanOrEqual(256 << 10);
    });
  },
);
