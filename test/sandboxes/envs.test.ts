/**
 * The sandbox host's Harbor tasks: archives uploaded and checked, sandboxes made from them, verify
 * and solve once per call id, and an agent that tries to set its own reward gaining nothing.
 */
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { packTar, type TarEntry } from "modern-tar";
import { describe, expect, it } from "vitest";
import { ArchiveInfo, SandboxInfo, SolveResponse, VerifyResponse } from "../../protocol/agents/sandbox.js";
import { callId, isolationTestsRun, useHost, type TestHost } from "./harness.js";
import { taskFiles } from "./harbor-fixtures.js";

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/** A task archive as the client makes it: sorted entries, mtime 0, gzip'd. */
async function pack(files: Map<string, Uint8Array>, executable = new Set<string>(), extra: TarEntry[] = []) {
  const entries: TarEntry[] = [...files]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, body]) => ({
      header: { name, size: body.byteLength, mtime: new Date(0), mode: executable.has(name) ? 0o755 : 0o644 },
      body,
    }));
  return new Uint8Array(gzipSync(await packTar([...entries, ...extra])));
}

async function fixtureArchive(name: string, changes: Record<string, string> = {}) {
  const { files, executable } = taskFiles(name);
  for (const [path, content] of Object.entries(changes)) files.set(path, new TextEncoder().encode(content));
  return pack(files, executable);
}

async function put(host: TestHost, archive: Uint8Array, name = sha(archive)) {
  const response = await fetch(`${host.url}/v1/archives/${name}`, {
    method: "PUT",
    headers: { Authorization: "Bearer test-token-0123456789abcdef", "Content-Type": "application/gzip" },
    body: archive as Uint8Array<ArrayBuffer>,
  });
  return { status: response.status, body: (await response.json()) as any };
}

/** Uploads a fixture task and makes a sandbox of it. */
async function sandboxOf(host: TestHost, id: string, fixture: string, changes: Record<string, string> = {}) {
  const archive = await fixtureArchive(fixture, changes);
  expect((await put(host, archive)).status).toBe(201);
  const created = await host.request("POST", "/v1/sandboxes", { id, task: { archive: sha(archive) } });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  return SandboxInfo.parse(created.body);
}

async function verify(host: TestHost, id: string, call = callId()) {
  const r = await host.request("POST", `/v1/sandboxes/${id}/verify/${call}`, {});
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return VerifyResponse.parse(r.body);
}

async function terminal(host: TestHost, id: string, command: string) {
  const r = await host.call(id, callId(), "run_terminal", { command, timeoutMs: 60_000 });
  expect(r.ok, JSON.stringify(r)).toBe(true);
  return r.result as { exitCode: number; stdout: string; stderr: string };
}

describe("task archives", () => {
  const host = useHost({ maxArchiveBytes: 256 * 1024 });

  it("takes an archive by its hash, answers it back, and 404 for one it does not hold", async () => {
    const archive = await fixtureArchive("plain");
    const put1 = await put(host, archive);
    expect(put1).toEqual({ status: 201, body: { sha256: sha(archive), bytes: archive.byteLength } });
    ArchiveInfo.parse(put1.body);
    expect(await host.request("GET", `/v1/archives/${sha(archive)}`)).toEqual({ status: 200, body: put1.body });
    expect(await host.request("GET", `/v1/archives/${"0".repeat(64)}`)).toMatchObject({
      status: 404,
      body: { code: "not_found" },
    });
    expect((await host.request("GET", `/v1/archives/${sha(archive)}`, undefined, null)).status).toBe(401);
  });

  it("refuses an archive whose bytes are not its name's hash", async () => {
    const archive = await fixtureArchive("plain");
    const r = await put(host, archive, sha(await fixtureArchive("strict")));
    expect(r).toMatchObject({ status: 400, body: { code: "invalid_request" } });
    expect(r.body.message).toContain("SHA-256");
  });

  it("refuses a task the sandboxes cannot run, naming the file and line", async () => {
    const archive = await fixtureArchive("plain", {
      "environment/Dockerfile": "FROM ubuntu:24.04\nRUN apt-get install -y jq\n",
    });
    const r = await put(host, archive);
    expect(r).toMatchObject({ status: 400, body: { code: "invalid_request" } });
    expect(r.body.message).toContain("environment/Dockerfile:2: RUN");
    expect((await host.request("GET", `/v1/archives/${sha(archive)}`)).status).toBe(404);
  });

  it("refuses an archive over its cap with 413", async () => {
    const noise = new Uint8Array(300 * 1024).map((_, i) => (i * 2654435761) >>> 24);
    const archive = new Uint8Array(gzipSync(noise, { level: 0 }));
    expect(await put(host, archive)).toMatchObject({ status: 413, body: { code: "payload_too_large" } });
  });

  it.each([
    ["a path that climbs out", { header: { name: "../escape.txt", size: 1 }, body: "x" }],
    ["an absolute path", { header: { name: "/etc/escape.txt", size: 1 }, body: "x" }],
    ["a symbolic link", { header: { name: "environment/link", type: "symlink", linkname: "/etc/passwd", size: 0 } }],
    ["a hard link", { header: { name: "environment/hard", type: "link", linkname: "task.toml", size: 0 } }],
  ] as [string, TarEntry][])("refuses an archive holding %s", async (_, entry) => {
    const { files, executable } = taskFiles("plain");
    const r = await put(host, await pack(files, executable, [entry]));
    expect(r).toMatchObject({ status: 400, body: { code: "invalid_request" } });
  });

  it("refuses an archive whose file inflates past the cap on one file, before unpacking it", async () => {
    const { files, executable } = taskFiles("plain");
    files.set("environment/zeros.bin", new Uint8Array(65 * 2 ** 20));
    const archive = await pack(files, executable);
    expect(archive.byteLength).toBeLessThan(256 * 1024);
    const r = await put(host, archive);
    expect(r).toMatchObject({ status: 400, body: { code: "invalid_request" } });
    expect(r.body.message).toContain("environment/zeros.bin: is over");
  });

  it("refuses what is not a gzip'd tar", async () => {
    const r = await put(host, new TextEncoder().encode("not an archive"));
    expect(r).toMatchObject({ status: 400, body: { code: "invalid_request" } });
  });

  it("makes a sandbox of a task: its environment is the tree and the diff's base", async () => {
    const info = await sandboxOf(host, "task-plain-1", "plain");
    expect(info.task).toMatchObject({
      instruction: "Write the word `done` into answer.txt.\n",
      verifierTimeoutSec: 30,
      agentTimeoutSec: null,
      hasSolution: false,
      verified: false,
    });
    expect(info.files).toBe(1);
    const read = await host.call("task-plain-1", callId(), "read_file", { path: "answer.txt" });
    expect(JSON.stringify(read)).toContain("nothing yet");
    expect((await host.request("GET", "/v1/sandboxes/task-plain-1/diff")).body.diff).toBe("");
    // Neither the tests nor anything else of the task but its environment is in the tree.
    expect((await host.call("task-plain-1", callId(), "list_dir", {})).result).not.toContain("test");
  });

  it("gives a task's sandbox the disk its task.toml asks for", async (ctx) => {
    if (host.isolation.disk !== "tmpfs") ctx.skip();
    await sandboxOf(host, "task-greet-disk", "greeting");
    const df = await terminal(host, "task-greet-disk", "df -k . | tail -1 | awk '{print $2}'");
    // storage_mb = 256
    expect(df.stdout.trim()).toBe(String(256 * 1024));
  });

  it("answers 404 for a sandbox of an archive it does not hold, and for a solve of a task without one", async () => {
    const r = await host.request("POST", "/v1/sandboxes", { id: "task-missing", task: { archive: "a".repeat(64) } });
    expect(r).toMatchObject({ status: 404, body: { code: "not_found" } });
    await sandboxOf(host, "task-plain-2", "plain");
    expect(await host.request("POST", `/v1/sandboxes/task-plain-2/solve/${callId()}`, {})).toMatchObject({
      status: 404,
      body: { code: "not_found" },
    });
    await host.create("no-task-1");
    expect(await host.request("POST", `/v1/sandboxes/no-task-1/verify/${callId()}`, {})).toMatchObject({
      status: 409,
      body: { code: "conflict" },
    });
  });

  it.skipIf(process.getuid?.() !== 0)(
    "under direct, verifies with the tests and the reward directory bound in a mount namespace of the run's own",
    async () => {
      await sandboxOf(host, "task-direct-ok", "plain");
      await terminal(host, "task-direct-ok", "echo done > answer.txt");
      expect(await verify(host, "task-direct-ok")).toMatchObject({ reward: 1, components: { reward: 1 } });
    },
    60_000,
  );

  it.skipIf(process.getuid?.() !== 0)(
    "under direct, kills what the agent left running before the tests run, so it cannot write their reward",
    async () => {
      await sandboxOf(host, "task-direct-hack", "strict");
      // A process of the agent's that outlives its command, looking for the verifier's reward
      // directory through every process's root (the verifier runs as the same user).
      await terminal(
        host,
        "task-direct-hack",
        `setsid sh -c 'while true; do for p in /proc/[0-9]*; do [ -d "$p/root/logs/verifier" ] && echo 1 > "$p/root/logs/verifier/reward.txt" 2>/dev/null; done; sleep 0.05; done' >/dev/null 2>&1 < /dev/null & echo started`,
      );
      const result = await verify(host, "task-direct-hack");
      expect(result).toMatchObject({ reward: 0, components: {} });
      expect(result.log).toContain("neither /logs/verifier/reward.txt nor");
    },
    60_000,
  );
});

describe.skipIf(!isolationTestsRun)("verify and solve under bubblewrap", () => {
  const host = useHost({ driver: "bubblewrap" });

  it("scores the tree with reward.txt", async () => {
    await sandboxOf(host, "task-plain-ok", "plain");
    await terminal(host, "task-plain-ok", "echo done > answer.txt");
    const result = await verify(host, "task-plain-ok");
    expect(result).toMatchObject({ reward: 1, components: { reward: 1 }, exitCode: 0, replayed: false });
    expect(result.log).toContain("answer: done");
  }, 60_000);

  it("scores with reward.json's components, in the Dockerfile's WORKDIR with its ENV and the verifier's env", async () => {
    await sandboxOf(host, "task-greet-0", "greeting");
    const before = await verify(host, "task-greet-0");
    expect(before).toMatchObject({ reward: 0, components: { Ada: 0, Grace: 0, reward: 0 } });
    expect(before.log).toContain("Ada: Hi");
  }, 60_000);

  it("runs the reference solution, which then scores 1; a verify answers once per call id", async () => {
    const info = await sandboxOf(host, "task-greet-1", "greeting");
    expect(info.task?.hasSolution).toBe(true);
    const solveId = callId();
    const solved = await host.request("POST", `/v1/sandboxes/task-greet-1/solve/${solveId}`, {});
    expect(SolveResponse.parse(solved.body)).toMatchObject({ exitCode: 0, replayed: false });
    const again = await host.request("POST", `/v1/sandboxes/task-greet-1/solve/${solveId}`, {});
    expect(SolveResponse.parse(again.body)).toMatchObject({ exitCode: 0, replayed: true });
    const id = callId();
    const first = await verify(host, "task-greet-1", id);
    expect(first).toMatchObject({ reward: 1, components: { Ada: 1, Grace: 1, reward: 1 }, replayed: false });
    const repeat = await verify(host, "task-greet-1", id);
    expect(repeat).toEqual({ ...first, replayed: true });
    // After the verify the tree holds the tests' leftovers: no more calls, no second verify.
    expect(await host.request("POST", `/v1/sandboxes/task-greet-1/verify/${callId()}`, {})).toMatchObject({
      status: 409,
      body: { code: "conflict" },
    });
    const call = await host.request("POST", `/v1/sandboxes/task-greet-1/calls/${callId()}`, {
      tool: "list_dir",
      args: {},
    });
    expect(call).toMatchObject({ status: 409, body: { code: "conflict" } });
    expect((await host.request("GET", "/v1/sandboxes/task-greet-1")).body.task.verified).toBe(true);
  }, 60_000);

  it("gives an agent that writes its own reward, or the tests, nothing", async () => {
    await sandboxOf(host, "task-hack-files", "strict");
    const hack = await terminal(
      host,
      "task-hack-files",
      [
        // The verifier's reward file, where the agent can reach for it.
        "mkdir -p /logs/verifier 2>/dev/null && echo 1 > /logs/verifier/reward.txt",
        // Reward files, and a test script that passes, in its tree.
        "echo 1 > reward.txt",
        `echo '{"reward": 1}' > reward.json`,
        "mkdir -p logs/verifier tests && echo 1 > logs/verifier/reward.txt",
        `printf '#!/bin/bash\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\\n' > tests/test.sh`,
        // A process left to write the reward file once the tests have started.
        `(setsid sh -c 'for i in $(seq 1 200); do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' >/dev/null 2>&1 &)`,
        "echo planted",
      ].join("; "),
    );
    expect(hack.stdout).toContain("planted");
    const result = await verify(host, "task-hack-files");
    expect(result).toMatchObject({ reward: 0, components: {} });
    expect(result.log).toContain("answer: not yet");
  }, 60_000);

  it("gives an agent that plants code for the tests' tools under HOME nothing", async () => {
    await sandboxOf(host, "task-hack-home", "greeting");
    // Python loads usercustomize from the user site under HOME: the agent's HOME is not the verifier's.
    await terminal(
      host,
      "task-hack-home",
      `site=$(python3 -c 'import site; print(site.getusersitepackages())') && mkdir -p "$site" && printf 'import atexit\\ndef win():\\n    open("/logs/verifier/reward.json", "w").write("{\\\\"reward\\\\": 1}")\\natexit.register(win)\\n' > "$site/usercustomize.py" && python3 -c 'import usercustomize' 2>&1; echo "$site"`,
    );
    const result = await verify(host, "task-hack-home");
    expect(result).toMatchObject({ reward: 0, components: { Ada: 0, Grace: 0, reward: 0 } });
  }, 60_000);

  it("keeps the tests and the solution out of the agent's reach until they run", async () => {
    await sandboxOf(host, "task-hack-search", "greeting");
    const found = await terminal(
      host,
      "task-hack-search",
      "find / -path /proc -prune -o \\( -name solve.sh -o -name solution -o -name score.py -o -name 'test.sh' \\) -print 2>/dev/null; grep -rl 'Hello, {sys.argv' /tmp /workspace /app 2>/dev/null; echo searched",
    );
    expect(found.stdout.trim()).toBe("searched");
    expect((await verify(host, "task-hack-search")).reward).toBe(0);
  }, 120_000);
});
