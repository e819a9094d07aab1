/**
 * `sextant agent` end to end: the real CLI against `npm start`'s edge, whose simulator plays the
 * scripted agent model on each fixture repository. A task run from the CLI finishes, its diff
 * applies to a copy of the repository and makes its tests pass, and list, logs, follow, cancel and
 * the usage errors answer as documented.
 */
import { spawnSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TaskEvent } from "../../protocol/agents/task.js";
import { findSecrets, redact, REDACTED } from "../../client/index/secrets.js";
import {
  agentFixtures,
  copyOfRepo,
  startAgentStack,
  startTestSandboxHost,
  taskEnded,
  taskEvents,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { sextantAsync } from "../support/local-edge.js";
import { LOCAL_ANTHROPIC_MODEL } from "../../scripts/local-gateway.js";

let host: SandboxHostHandle;
let stack: AgentStack;
const cli = (...args: string[]) => sextantAsync(args, stack.env);

beforeAll(async () => {
  // A sandbox host of the suite's own, so a test can read what an upload put in a task's tree.
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host });
});
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
});

const fixtures = agentFixtures();
const sum = fixtures.find((f) => f.name === "sum")!;
const taskIdIn = (stdout: string) => stdout.match(/Created task (task_\w+)/)?.[1];
/** Stderr without the bin's notice that it runs the source (other work may touch it while tests run). */
const errorsIn = (stderr: string) =>
  stderr
    .split("\n")
    .filter((l) => !l.startsWith("sextant: client/dist is missing or older"))
    .join("\n");
const jsonLines = (stdout: string) =>
  stdout
    .trim()
    .split("\n")
    .map((line) => TaskEvent.parse(JSON.parse(line)));

/**
 * Sets the simulated backends' time to first token through the simulator's control API (which
 * `npm start` prints); the returned function sets it back.
 */
async function slowModel(ttftMs: number): Promise<() => Promise<void>> {
  const { url: control, headers } = stack.edge.simulatorControl();
  const { backends } = (await (await fetch(`${control}/backends`, { headers })).json()) as {
    backends: { id: string; options: { ttftMs: number } }[];
  };
  const patch = (id: string, ms: number) =>
    fetch(`${control}/backends/${encodeURIComponent(id)}`, {
      method: "PATCH",
      headers: { ...headers, "Content-Type": "application/json" },
      body: JSON.stringify({ ttftMs: ms }),
    }).then((r) => expect(r.status).toBe(200));
  await Promise.all(backends.map((b) => patch(b.id, ttftMs)));
  return async () => void (await Promise.all(backends.map((b) => patch(b.id, b.options.ttftMs))));
}

/** Node's test runner in a directory: the check each fixture's solution must pass. */
const nodeTests = (dir: string) => spawnSync(process.execPath, ["--test", "test/"], { cwd: dir, encoding: "utf8" });

describe("sextant agent", () => {
  let runId: string;

  it("runs a task on a directory and prints its progress, then its end and diff stats", async () => {
    const dir = copyOfRepo(sum);
    const run = await cli("agent", "run", sum.prompt, dir);
    expect(errorsIn(run.stderr)).toBe("");
    expect(run.code).toBe(0);
    runId = taskIdIn(run.stdout)!;
    expect(runId).toMatch(/^task_/);
    expect(run.stdout).toMatch(/Uploaded 3 files \(\d[\d,]* bytes\) in 1 request\./);
    expect(run.stdout).toContain("Turn 1");
    expect(run.stdout).toContain("Reading the code and running its tests.");
    expect(run.stdout).toMatch(/read_file\s+src\/sum\.js\s+ok\s+\d+ ms/);
    expect(run.stdout).toMatch(/run_terminal\s+node --test test\/\s+(ok|exit \d+)\s+\d+ ms/);
    expect(run.stdout).toMatch(/edit_file\s+src\/sum\.js\s+ok\s+\d+ ms/);
    expect(run.stdout).toContain("Task finished (finished): Fixed sum");
    expect(run.stdout).toContain(`1 file changed, +1 -1. Apply with \`sextant agent apply ${runId} ${dir}\`.`);
    // The run changed nothing locally: the change waits to be applied.
    expect(readFileSync(join(dir, "src/sum.js"), "utf8")).not.toBe(sum.changed["src/sum.js"]);
  });

  it.each(fixtures.map((f) => [f.name, f] as const))(
    "solves %s with --json events, and apply makes the copy's tests pass",
    async (_name, fixture) => {
      const dir = copyOfRepo(fixture);
      expect(nodeTests(dir).status).not.toBe(0);
      const run = await cli("agent", "run", "--json", fixture.prompt, dir);
      expect(run.code, run.stderr).toBe(0);
      const events = jsonLines(run.stdout);
      expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i + 1));
      expect(events.at(-1)).toMatchObject({ type: "task.ended", data: { status: "finished", reason: "finished" } });
      // Each line names its task too, for a reader that started the task with --json.
      const id = (JSON.parse(run.stdout.split("\n")[0]!) as { taskId: string }).taskId;
      expect(id).toMatch(/^task_/);

      const dry = await cli("agent", "apply", id, dir, "--dry-run");
      expect(dry.code).toBe(0);
      expect(dry.stdout).toContain(`--- a/${Object.keys(fixture.changed)[0]}`);
      const applied = await cli("agent", "apply", id, dir);
      expect(applied.code, applied.stderr).toBe(0);
      expect(applied.stdout).toContain(`Applied task ${id} to ${dir}`);
      for (const [path, content] of Object.entries(fixture.changed)) {
        expect(applied.stdout).toContain(path);
        expect(readFileSync(join(dir, path), "utf8")).toBe(content);
      }
      const tests = nodeTests(dir);
      expect(tests.status, tests.stdout + tests.stderr).toBe(0);

      // Applied once, the diff no longer applies: refused, and nothing changes.
      const again = await cli("agent", "apply", id, dir);
      expect(again.code).toBe(1);
      expect(again.stderr).toContain(`The diff of task ${id} does not apply to ${dir}; nothing was changed.`);
    },
  );

  it("applies to a directory below a git repository's root, where plain git apply would skip every file", async () => {
    const repo = mkdtempSync(join(tmpdir(), "sextant-agent-repo-"));
    spawnSync("git", ["init", "-q"], { cwd: repo });
    const dir = join(repo, "packages/sum");
    mkdirSync(dirname(dir), { recursive: true });
    cpSync(sum.repo, dir, { recursive: true });
    const applied = await cli("agent", "apply", runId, dir);
    expect(applied.code, applied.stderr).toBe(0);
    expect(readFileSync(join(dir, "src/sum.js"), "utf8")).toBe(sum.changed["src/sum.js"]);
  });

  it("uploads what index would send: ignore rules, secrets redacted, binaries as bytes, bad names skipped and named", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sextant-agent-upload-"));
    const write = (path: string, content: string | Buffer, mode = 0o644) => {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), content, { mode });
    };
    // Built at run time so that no scanner mistakes this test file for a leak.
    const token = ["ghp_", "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx"].join("");
    const config = `export const config = { token: "${token}" };\n`;
    const binary = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 0xff, 0]);
    write("src/config.js", config);
    write("src/ok.js", "export const ok = 1;\n");
    write("bin/run.sh", "#!/bin/sh\necho hi\n", 0o755);
    write("assets/logo.png", binary);
    write(".gitignore", "*.log\n");
    write("debug.log", "ignored\n");
    write(".env", `API_TOKEN=${token}\n`);
    write("node_modules/dep/index.js", "module.exports = 1;\n");
    write("bad\nname.js", "x\n");
    writeFileSync(Buffer.concat([Buffer.from(`${dir}/`), Buffer.from([0x66, 0xff, 0x2e, 0x6a, 0x73])]), "x\n");
    write(`${Array.from({ length: 70 }, (_, i) => `d${i}`).join("/")}/deep.js`, "x\n");
    symlinkSync("src/ok.js", join(dir, "link.js"));
    // More files than one request takes (2,000), and two files that each fill most of a 1 MiB body.
    for (let i = 0; i < 2100; i++) write(`many/f${i}.txt`, `${i}\n`);
    write("big/a.txt", "a".repeat(600_000));
    write("big/b.txt", "b".repeat(600_000));

    const run = await cli("agent", "run", "--detach", "Look around (agent task fixture none).", dir);
    expect(run.code, errorsIn(run.stderr)).toBe(0);
    const id = run.stdout.trim().split("\n").at(-1)!;
    const requests = Number(run.stdout.match(/Uploaded 2,107 files \([\d,]+ bytes\) in (\d+) requests/)?.[1]);
    expect(requests, run.stdout).toBeGreaterThanOrEqual(3);
    expect(run.stdout).toContain("1 secret withheld from 1 file");
    expect(run.stdout).toMatch(/skipped .*1 path too long or too deep/);
    expect(run.stdout).toContain(`skipped "bad\\nname.js": control character or backslash in name`);
    expect(run.stdout).toContain("skipped f\uFFFD.js: name not UTF-8");
    expect(run.stdout).toContain("skipped link.js: symlink");
    expect(run.stdout).toMatch(/skipped d0\/d1\/.*: path too long or too deep/);

    const tree = join(host.root, id, "disk", "tree");
    const uploaded = readFileSync(join(tree, "src/config.js"), "utf8");
    expect(uploaded).toBe(redact(config, await findSecrets("src/config.js", config)));
    expect(uploaded).toContain(REDACTED);
    expect(uploaded).not.toContain(token);
    expect(readFileSync(join(tree, "assets/logo.png")).equals(binary)).toBe(true);
    expect(statSync(join(tree, "bin/run.sh")).mode & 0o111).not.toBe(0);
    expect(statSync(join(tree, "src/ok.js")).mode & 0o111).toBe(0);
    expect(readFileSync(join(tree, "many/f2099.txt"), "utf8")).toBe("2099\n");
    expect(statSync(join(tree, "big/b.txt")).size).toBe(600_000);
    for (const absent of [".env", "debug.log", "node_modules", "link.js", "bad\nname.js", "d0"])
      expect(existsSync(join(tree, absent)), absent).toBe(false);
    await cli("agent", "cancel", id);
  });

  it("fails a prompt the scripted agent model has no script for, saying why and how to run a real model", async () => {
    const run = await cli("agent", "run", "write a haiku", copyOfRepo(sum));
    expect(run.code, run.stderr).toBe(1);
    const id = taskIdIn(run.stdout)!;
    const explanation = "The simulator's scripted agent model has no script for this prompt";
    const recipe = "INFERENCE_UPSTREAM=http://127.0.0.1:11434/v1 AGENT_MODEL=qwen2.5-coder:7b npm start";
    expect(run.stdout).toMatch(/Task failed \(model_error\): The model answered 400: .*has no script for this prompt/);
    expect(run.stdout).toContain(recipe);
    expect(errorsIn(run.stderr)).toContain(`Task ${id} ended failed (model_error).`);
    // No turn was made up: the model's refusal is the task's end.
    expect(run.stdout).not.toContain("Turn 1");
    expect(run.stdout).not.toMatch(/sim\d/);

    const task = await stack.sdk.agents.get(id);
    expect([task.status, task.endReason, task.usage.turns]).toEqual(["failed", "model_error", 0]);
    const ended = (await taskEvents(stack.sdk, id)).at(-1)!;
    expect(ended).toMatchObject({ type: "task.ended", data: { status: "failed", reason: "model_error" } });
    expect(String(ended.data!.message)).toContain(explanation);
    expect(String(ended.data!.message)).toContain(recipe);
  });

  it("fails a task on the simulated Anthropic model (claude-simulated) that has no script, saying why, through the gateway's translation", async () => {
    const { id } = await stack.sdk.agents.create({ prompt: "write a haiku", model: LOCAL_ANTHROPIC_MODEL });
    await stack.sdk.agents.uploadFiles(id, [{ path: "README.md", content: "eA==" }]);
    await stack.sdk.agents.start(id);
    const task = await taskEnded(stack.sdk, id);
    expect([task.status, task.endReason, task.usage.turns, task.model]).toEqual([
      "failed",
      "model_error",
      0,
      LOCAL_ANTHROPIC_MODEL,
    ]);
    const ended = (await taskEvents(stack.sdk, id)).at(-1)!;
    expect(ended).toMatchObject({ type: "task.ended", data: { status: "failed", reason: "model_error" } });
    expect(String(ended.data!.message)).toMatch(/^The model answered 400: .*has no script for this prompt/);
    expect(String(ended.data!.message)).toContain(
      "INFERENCE_UPSTREAM=http://127.0.0.1:11434/v1 AGENT_MODEL=qwen2.5-coder:7b npm start",
    );
  });

  it("lists the task, and prints its logs as text and as JSON lines", async () => {
    const list = await cli("agent", "list");
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`${runId}\\s+finished\\s+finished`));
    const listed = JSON.parse((await cli("--json", "agent", "list")).stdout) as { id: string }[];
    expect(listed.map((t) => t.id)).toContain(runId);

    const logs = await cli("agent", "logs", runId);
    expect(logs.code).toBe(0);
    expect(logs.stdout).toContain("Task: Make the failing test of sum pass");
    expect(logs.stdout).toMatch(/edit_file\s+src\/sum\.js\s+ok/);
    expect(logs.stdout).toContain("Task finished (finished)");
    const task = await stack.sdk.agents.get(runId);
    const events = jsonLines((await cli("agent", "logs", runId, "--json")).stdout);
    expect(events.map((e) => e.id)).toEqual(Array.from({ length: task.lastEventId }, (_, i) => i + 1));
  });

  it("cancels a detached task, which follow then reports as cancelled with exit code 1", async () => {
    // A model that takes 30 s to answer keeps the task in its first turn until it is cancelled.
    const restore = await slowModel(30_000);
    const detached = await cli("agent", "run", "--detach", sum.prompt, copyOfRepo(sum)).finally(restore);
    expect(detached.code, detached.stderr).toBe(0);
    const id = detached.stdout.trim().split("\n").at(-1)!;
    expect(id).toMatch(/^task_\w+$/);
    expect((await stack.sdk.agents.get(id)).status).toBe("running");

    const cancel = await cli("agent", "cancel", id);
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(cancel.stdout).toBe(`Cancelled task ${id}.\n`);
    expect(await stack.sdk.agents.get(id)).toMatchObject({ status: "cancelled", endReason: "cancelled" });

    const follow = await cli("agent", "follow", id);
    expect(follow.code).toBe(1);
    expect(follow.stdout).toContain("Task cancelled (cancelled).");
    expect(follow.stderr).toContain(`Task ${id} ended cancelled (cancelled).`);
  });

  it("answers bad usage with exit code 2 and an unknown task with the problem and exit code 4", async () => {
    const noPrompt = await cli("agent", "run");
    expect(noPrompt.code).toBe(2);
    expect(noPrompt.stderr).toContain("missing required argument 'task'");
    const blank = await cli("agent", "run", "  ", copyOfRepo(sum));
    expect(blank.code).toBe(2);
    const badTurns = await cli("agent", "run", "x", copyOfRepo(sum), "--max-turns", "0");
    expect([badTurns.code, badTurns.stderr]).toEqual([2, expect.stringContaining("--max-turns must be")]);
    const noDir = await cli("agent", "run", "x", "/nonexistent/sextant-agent");
    expect([noDir.code, noDir.stderr]).toEqual([2, expect.stringContaining("is not a directory")]);

    for (const command of ["logs", "follow", "cancel", "apply"]) {
      const unknown = await cli("agent", command, "task_unknown0000");
      expect(unknown.code, command).toBe(4);
      expect(errorsIn(unknown.stderr), command).toMatch(
        /^error: Not found: No agent task `task_unknown0000` in your org\. \[not_found/,
      );
    }
    const json = await cli("--json", "agent", "logs", "task_unknown0000");
    expect(JSON.parse(errorsIn(json.stderr))).toMatchObject({ error: { status: 404, code: "not_found" } });
  });
});
