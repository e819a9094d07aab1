import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { CallResponse, SandboxInfo } from "../../protocol/agents/sandbox.js";
import { callId, useHost } from "./harness.js";

const host = useHost({ maxBodyBytes: 1 << 20 });

describe("authentication", () => {
  it("answers 401 without a token", async () => {
    const r = await host.request("GET", "/v1/sandboxes/no-token-1", undefined, null);
    expect(r).toMatchObject({ status: 401, body: { code: "unauthenticated" } });
  });

  it("answers 401 for a wrong token", async () => {
    const r = await host.request("POST", "/v1/sandboxes", { id: "wrong-token" }, "not-the-token");
    expect(r).toMatchObject({ status: 401, body: { code: "unauthenticated" } });
  });
});

describe("sandboxes", () => {
  it("creates a sandbox with a fresh 256-bit data key and answers 409 for its id again", async () => {
    const created = await host.request("POST", "/v1/sandboxes", { id: "create-1" });
    expect(created.status).toBe(201);
    const info = SandboxInfo.parse(created.body);
    expect(Buffer.from(info.dataKey, "base64url")).toHaveLength(32);
    expect(info).toMatchObject({ id: "create-1", driver: "direct", files: 0, bytes: 0 });
    expect((await host.request("GET", "/v1/sandboxes/create-1")).body).toEqual(created.body);
    const again = await host.request("POST", "/v1/sandboxes", { id: "create-1" });
    expect(again).toMatchObject({ status: 409, body: { code: "conflict" } });
  });

  it("stops a sandbox's running command on request, keeping its tree and taking calls after", async () => {
    expect((await host.request("POST", "/v1/sandboxes", { id: "stopping-1" })).status).toBe(201);
    const running = host.request("POST", `/v1/sandboxes/stopping-1/calls/${callId()}`, {
      tool: "run_terminal",
      args: { command: "echo started > mark.txt; sleep 60", timeoutMs: 120_000 },
    });
    // Once the command has started, stop it.
    await vi.waitFor(() => expect(existsSync(join(host.root, "stopping-1", "disk", "tree", "mark.txt"))).toBe(true), {
      timeout: 30_000,
      interval: 50,
    });
    expect((await host.request("POST", "/v1/sandboxes/stopping-1/stop")).status).toBe(204);
    const outcome = CallResponse.parse((await running).body);
    expect(outcome.ok).toBe(true);
    expect((outcome as { result: { exitCode: number | null } }).result.exitCode).not.toBe(0);
    const diff = await host.request("GET", "/v1/sandboxes/stopping-1/diff");
    expect((diff.body as { diff: string }).diff).toContain("+++ b/mark.txt");
    const after = await host.request("POST", `/v1/sandboxes/stopping-1/calls/${callId()}`, {
      tool: "run_terminal",
      args: { command: "echo again" },
    });
    expect((CallResponse.parse(after.body) as { result: { stdout: string } }).result.stdout).toBe("again\n");
  });

  it("answers 404 for an unknown sandbox on every route", async () => {
    for (const [method, path] of [
      ["GET", "/v1/sandboxes/never-made"],
      ["DELETE", "/v1/sandboxes/never-made"],
      ["GET", "/v1/sandboxes/never-made/diff"],
    ] as const)
      expect(await host.request(method, path)).toMatchObject({ status: 404, body: { code: "not_found" } });
    const call = await host.request("POST", "/v1/sandboxes/never-made/calls/c1", { tool: "list_dir", args: {} });
    expect(call).toMatchObject({ status: 404, body: { code: "not_found" } });
  });

  it("answers 400 for a body that is not JSON, or not a valid request", async () => {
    expect(await host.request("POST", "/v1/sandboxes", "{not json")).toMatchObject({
      status: 400,
      body: { code: "invalid_request" },
    });
    expect(await host.request("POST", "/v1/sandboxes", { id: "short" })).toMatchObject({
      status: 400,
      body: { code: "invalid_request" },
    });
    await host.create("bad-bodies");
    const upload = await host.request("POST", "/v1/sandboxes/bad-bodies/files", {
      files: [{ path: "../x", content: "" }],
    });
    expect(upload).toMatchObject({ status: 400, body: { code: "invalid_request" } });
    const absolute = await host.request("POST", "/v1/sandboxes/bad-bodies/files", {
      files: [{ path: "/etc/x", content: "" }],
    });
    expect(absolute).toMatchObject({ status: 400, body: { code: "invalid_request" } });
  });

  it("deletes a sandbox with its tree, and answers 404 for it afterwards", async () => {
    await host.create("delete-me");
    await host.upload("delete-me", { "a.txt": "a\n" });
    expect(existsSync(join(host.root, "delete-me"))).toBe(true);
    expect((await host.request("DELETE", "/v1/sandboxes/delete-me")).status).toBe(204);
    expect(existsSync(join(host.root, "delete-me"))).toBe(false);
    expect((await host.request("GET", "/v1/sandboxes/delete-me")).status).toBe(404);
  });

  // As root every sandbox has a uid of its own, whose processes all go with it.
  it.skipIf(process.getuid?.() !== 0)(
    "kills what a deleted sandbox's commands left running in a session of their own",
    async () => {
      await host.create("delete-daemon");
      await host.call("delete-daemon", callId(), "run_terminal", {
        // It waits for the daemon to be in its own session before it ends.
        command:
          "setsid sh -c 'echo $$ > daemon; exec sleep 60' > /dev/null 2>&1 < /dev/null & while [ ! -s daemon ]; do sleep 0.05; done",
      });
      const pid = Number(readFileSync(join(host.root, "delete-daemon", "disk", "tree", "daemon"), "utf8"));
      expect(isAlive(pid)).toBe(true);
      expect((await host.request("DELETE", "/v1/sandboxes/delete-daemon")).status).toBe(204);
      await vi.waitFor(() => expect(isAlive(pid)).toBe(false), { timeout: 10_000 });
    },
  );

  it("kills a sandbox's running command when the sandbox is deleted", async () => {
    await host.create("delete-running");
    const running = host.call("delete-running", callId(), "run_terminal", {
      command: "echo $$ > pid; exec sleep 60",
      timeoutMs: 60_000,
    });
    const pidFile = join(host.root, "delete-running", "disk", "tree", "pid");
    await vi.waitFor(() => expect(readFileSync(pidFile, "utf8")).toMatch(/\d/), { timeout: 10_000 });
    const pid = Number(readFileSync(pidFile, "utf8"));
    expect((await host.request("DELETE", "/v1/sandboxes/delete-running")).status).toBe(204);
    await running.catch(() => undefined);
    expect(isAlive(pid)).toBe(false);
  });
});

describe("uploads", () => {
  it("writes the files into the tree and counts them", async () => {
    await host.create("upload-1");
    const r = await host.request("POST", "/v1/sandboxes/upload-1/files", {
      files: [
        { path: "src/deep/a.ts", content: Buffer.from("export {};\n").toString("base64") },
        { path: "run.sh", content: Buffer.from("#!/bin/sh\necho ran\n").toString("base64"), executable: true },
      ],
    });
    expect(r).toEqual({ status: 200, body: { files: 2, bytes: 30 } });
    const tree = join(host.root, "upload-1", "disk", "tree");
    expect(readFileSync(join(tree, "src/deep/a.ts"), "utf8")).toBe("export {};\n");
    const ran = await host.call("upload-1", callId(), "run_terminal", { command: "./run.sh" });
    expect(ran.result.stdout).toBe("ran\n");
    expect((await host.request("GET", "/v1/sandboxes/upload-1")).body).toMatchObject({ files: 2, bytes: 30 });
  });

  it("answers 507 for files past the sandbox's disk limit, and writes none of them", async () => {
    await host.create("upload-full", { limits: { diskBytes: 1 << 20 } });
    const big = Buffer.alloc(700_000, 97).toString("base64");
    await host.request("POST", "/v1/sandboxes/upload-full/files", { files: [{ path: "a.bin", content: big }] });
    const r = await host.request("POST", "/v1/sandboxes/upload-full/files", {
      files: [{ path: "b.bin", content: big }],
    });
    expect(r).toMatchObject({ status: 507, body: { code: "disk_full" } });
    expect(existsSync(join(host.root, "upload-full", "disk", "tree", "b.bin"))).toBe(false);
  });

  it("answers 413 for a body past the host's limit", async () => {
    await host.create("upload-huge");
    const content = Buffer.alloc(2 << 20, 97).toString("base64");
    const r = await host.request("POST", "/v1/sandboxes/upload-huge/files", { files: [{ path: "a.bin", content }] });
    expect(r).toMatchObject({ status: 413, body: { code: "payload_too_large" } });
  });

  it("refuses a path through a symlink that leads outside the tree", async () => {
    await host.create("upload-link");
    await host.call("upload-link", callId(), "run_terminal", { command: "ln -s /tmp out" });
    const r = await host.request("POST", "/v1/sandboxes/upload-link/files", {
      files: [{ path: "out/escaped.txt", content: "eA==" }],
    });
    expect(r.status).toBe(400);
    expect(existsSync("/tmp/escaped.txt")).toBe(false);
  });
});

describe("calls", () => {
  it("runs a call id once: the same id again answers the recorded outcome, replayed", async () => {
    await host.create("idempotent");
    const id = callId();
    const args = { command: "echo line >> log.txt; wc -l < log.txt" };
    const first = CallResponse.parse(await host.call("idempotent", id, "run_terminal", args));
    const second = CallResponse.parse(await host.call("idempotent", id, "run_terminal", args));
    expect(first.replayed).toBe(false);
    expect(second.replayed).toBe(true);
    expect(second.ok && second.result).toEqual(first.ok && first.result);
    expect(readFileSync(join(host.root, "idempotent", "disk", "tree", "log.txt"), "utf8")).toBe("line\n");
  });

  it("runs a call once when the same id arrives again while it runs", async () => {
    await host.create("concurrent");
    const id = callId();
    const args = { command: "echo line >> log.txt; sleep 0.3" };
    const answers = await Promise.all([1, 2, 3].map(() => host.call("concurrent", id, "run_terminal", args)));
    expect(answers.filter((a) => !a.replayed)).toHaveLength(1);
    expect(readFileSync(join(host.root, "concurrent", "disk", "tree", "log.txt"), "utf8")).toBe("line\n");
  });

  it("kills a command and the child it started at its timeout, before the call answers", async () => {
    await host.create("timeout-kill");
    const r = await host.call("timeout-kill", callId(), "run_terminal", {
      command: "echo $$ > pid; sleep 60 & echo $! > child; wait",
      timeoutMs: 300,
    });
    expect(r.result).toMatchObject({ timedOut: true, signal: "SIGKILL" });
    const tree = join(host.root, "timeout-kill", "disk", "tree");
    const pids = ["pid", "child"].map((f) => Number(readFileSync(join(tree, f), "utf8")));
    expect(pids.every((p) => p > 0)).toBe(true);
    expect(pids.filter(isAlive)).toEqual([]);
  });

  it("answers an unknown tool, `finish` and bad arguments as tool errors the model reads", async () => {
    await host.create("tool-errors");
    const unknown = await host.call("tool-errors", callId(), "rm_rf", {});
    expect(unknown).toMatchObject({ ok: false, error: { code: "unknown_tool" }, replayed: false });
    const finish = await host.call("tool-errors", callId(), "finish", { summary: "done" });
    expect(finish).toMatchObject({ ok: false, error: { code: "unknown_tool" } });
    const bad = await host.call("tool-errors", callId(), "read_file", { path: 42 });
    expect(bad).toMatchObject({ ok: false, error: { code: "invalid_arguments" } });
  });

  it("answers 400 for a call id the protocol does not allow", async () => {
    await host.create("bad-call-id");
    const r = await host.request("POST", "/v1/sandboxes/bad-call-id/calls/a%20b", { tool: "list_dir", args: {} });
    expect(r).toMatchObject({ status: 400, body: { code: "invalid_request" } });
  });
});

/** Whether a process runs (a zombie, killed but not yet reaped by init, does not). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}
