/**
 * The README's quick start, run as written: its first shell block starts the edge, its second is
 * run whole by bash from the checkout's root, as a newcomer pastes it into a second terminal. It
 * must reach a search result, a gateway answer and an agent's diff, so a README command that does
 * not work fails CI. What is not run literally is each named by a rule below.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, startLocalEdge, type LocalEdge } from "../support/local-edge.js";

/** The shell blocks of the README's "Quick start" section, in order. */
function quickStartBlocks(readme: string): string[] {
  const start = readme.indexOf("\n## Quick start\n");
  if (start < 0) throw new Error("README.md has no Quick start section");
  const end = readme.indexOf("\n## ", start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
}

const README = readFileSync(join(ROOT, "README.md"), "utf8");
const [startBlock, commands] = quickStartBlocks(README);
/** The port the README's commands name, which `npm start` listens on by default. */
const README_HOST = "127.0.0.1:8787";

/** Runs a script with bash from the checkout's root, as a terminal would. */
function bash(script: string, env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn("bash", ["-e", "-o", "pipefail", "-c", script], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d));
    child.stderr.on("data", (d: Buffer) => (output += d));
    child.once("close", (code) => resolve({ code, output }));
  });
}

describe("the README's quick start", () => {
  let edge: LocalEdge;

  it("is two shell blocks: npm install and npm start, then the commands of a second terminal", () => {
    expect(startBlock?.trim()).toBe("npm install && npm start");
    expect(commands).toBeDefined();
    expect(commands).toContain(README_HOST);
  });

  beforeAll(async () => {
    // Rule 1, `npm install`: left out, since CI has already installed from the lockfile (.ci/run runs
    // npm ci), and a second install would fetch nothing new.
    // Rule 2, `npm start`: run as `startLocalEdge` runs it, package.json's own start script (checked
    // here), on a free port with state and config directories of its own, so that it neither meets
    // a developer's edge on 8787 nor writes to their config.
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> };
    expect(pkg.scripts.start).toBe("tsx scripts/start.ts");
    edge = await startLocalEdge();
  }, 120_000);
  afterAll(async () => {
    await edge?.stop();
  });

  it("reaches a search result, a gateway answer and an agent's diff", async () => {
    // Rule 3, the port: the README's URLs name npm start's default address; here they name this edge's.
    const script = commands!.replaceAll(README_HOST, new URL(edge.baseURL).host);
    const { code, output } = await bash(script, {
      // The second terminal of a user whose config directory is where npm start saved its key; a
      // cache directory of its own, so the index starts from nothing.
      SEXTANT_CONFIG_DIR: edge.configDir,
      SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-quickstart-cache-")),
      SEXTANT_API_KEY: "",
      SEXTANT_BASE_URL: "",
      SEXTANT_ADMIN_SECRET: "",
      // npx may run only what the lockfile installed: never fetch or install a package.
      npm_config_yes: "false",
      npm_config_offline: "true",
    });
    expect(code, output).toBe(0);

    // A search result: a path with its lines and a fused score, the README's example among them.
    const example = /^```text\n(\S+):\d+-\d+ +\d\.\d{3}$/m.exec(README)?.[1];
    expect(example, "the README shows a search result").toBeDefined();
    expect(output).toMatch(new RegExp(`^${example!.replaceAll(".", "\\.")}:\\d+-\\d+ +[0-3]\\.\\d{3}$`, "m"));

    // A gateway answer: an OpenAI chat completion from the simulated backend.
    const completion = /^\{"id":"chatcmpl-.*$/m.exec(output)?.[0];
    expect(completion, output).toBeDefined();
    const parsed = JSON.parse(completion!) as { object: string; choices: { message: { content: string } }[] };
    expect(parsed.object).toBe("chat.completion");
    expect(parsed.choices[0]!.message.content).toMatch(/\S/);

    // An agent's diff: the task finished and its fix, as `agent apply --dry-run` prints it.
    expect(output).toContain("Task finished (finished)");
    expect(output).toContain("diff --git a/src/sum.js b/src/sum.js");
    expect(output).toContain("+  for (let i = 0; i < xs.length; i++) total += xs[i];");
  }, 180_000);
});
