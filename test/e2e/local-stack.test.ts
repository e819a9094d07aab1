/**
 * What `npm start`'s local stack keeps from the rest of the machine: agent tasks run under
 * bubblewrap or, without it, not at all (the edge says how to install it) unless the operator names
 * the `direct` driver, which the console then says loudly; and the edge's state (D1, R2, Durable
 * Objects) is readable by its user alone. A `bwrap` that cannot make namespaces (as where user
 * namespaces are off) stands in for a machine without a working bubblewrap.
 */
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chooseDriver, REFUSALS } from "../../scripts/local-sandbox.js";
import { rawCall } from "../support/agent-stack.js";
import { savedLocalEdge, startLocalEdge, type LocalEdge } from "../support/local-edge.js";

/** A directory whose `bwrap` answers `--version` and fails to make a sandbox, for the front of PATH. */
function brokenBubblewrap(): string {
  const dir = mkdtempSync(join(tmpdir(), "sextant-no-bwrap-"));
  writeFileSync(
    join(dir, "bwrap"),
    '#!/bin/sh\n[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }\n' +
      'echo "bwrap: No permissions to create new namespace" >&2\nexit 1\n',
    { mode: 0o755 },
  );
  return dir;
}

/** Every path under `dir` with permissions for group or others. */
function openToOthers(dir: string): string[] {
  const open: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isSymbolicLink()) continue;
    if (lstatSync(path).mode & 0o077) open.push(`${path} ${(lstatSync(path).mode & 0o777).toString(8)}`);
    if (entry.isDirectory()) open.push(...openToOthers(path));
  }
  return open;
}

const mode = (path: string) => statSync(path).mode & 0o777;
const createTask = (edge: LocalEdge) =>
  rawCall(edge, savedLocalEdge(edge).apiKey, "POST", "/v1/agents/tasks", { prompt: "Fix it." });

let off: LocalEdge;
let direct: LocalEdge;
/** A state directory left world-readable by an earlier `npm start`. */
const oldState = mkdtempSync(join(tmpdir(), "sextant-old-state-"));

beforeAll(async () => {
  const PATH = `${brokenBubblewrap()}:${process.env.PATH}`;
  chmodSync(oldState, 0o755);
  mkdirSync(join(oldState, "v3", "r2"), { recursive: true, mode: 0o755 });
  chmodSync(join(oldState, "v3"), 0o755);
  writeFileSync(join(oldState, "v3", "r2", "blob"), "indexed code", { mode: 0o644 });
  [off, direct] = await Promise.all([
    // A state directory npm start makes itself.
    startLocalEdge({
      persistTo: join(mkdtempSync(join(tmpdir(), "sextant-new-state-")), "state"),
      env: { PATH, SEXTANT_SANDBOX_DRIVER: undefined },
    }),
    startLocalEdge({ persistTo: oldState, env: { PATH, SEXTANT_SANDBOX_DRIVER: "direct" } }),
  ]);
});
afterAll(async () => {
  await Promise.all([off?.stop(), direct?.stop()]);
});

describe("npm start without a working bubblewrap", () => {
  it("starts the edge but refuses agent tasks, saying how to install bubblewrap", async () => {
    const r = await createTask(off);
    expect([r.status, r.type]).toEqual([503, "application/problem+json"]);
    const problem = r.json as { code: string; detail: string };
    expect(problem.code).toBe("unavailable");
    expect(problem.detail).toBe(REFUSALS.blocked);
    expect(problem.detail).toContain("SEXTANT_SANDBOX_DRIVER=direct");
    // The rest of the edge works.
    expect((await rawCall(off, savedLocalEdge(off).apiKey, "GET", "/v1/me")).status).toBe(200);
    expect(off.output()).toContain("!! Agent tasks are off on this edge: bubblewrap (`bwrap`) is installed but");
    expect(off.output()).not.toMatch(/Agent tasks run in|Agent sandboxes/);
  });

  it("runs tasks under `direct` only when SEXTANT_SANDBOX_DRIVER names it, and says so on the console", async () => {
    expect(direct.output()).toContain("!! Agent sandboxes: DIRECT (SEXTANT_SANDBOX_DRIVER=direct): NO namespaces.");
    expect(direct.output()).toContain("Agent tasks run in direct sandboxes");
    expect((await createTask(direct)).status).toBe(201);
  });
});

describe("choosing the sandbox driver", () => {
  const never = () => {
    throw new Error("not probed");
  };
  it("takes bubblewrap where it works, refuses without it, and runs direct only by name", () => {
    expect(chooseDriver({}, { works: () => true, installed: never })).toEqual({ driver: "bubblewrap" });
    const missing = chooseDriver({}, { works: () => false, installed: () => false });
    expect(missing).toEqual({ driver: undefined, refusal: REFUSALS.missing });
    for (const install of ["apt-get install bubblewrap", "dnf install bubblewrap", "SEXTANT_SANDBOX_DRIVER=direct"])
      expect(REFUSALS.missing).toContain(install);
    expect(
      chooseDriver({ SEXTANT_SANDBOX_DRIVER: "bubblewrap" }, { works: () => false, installed: () => true }),
    ).toEqual({ driver: undefined, refusal: REFUSALS.blocked });
    expect(chooseDriver({ SEXTANT_SANDBOX_DRIVER: "direct" }, { works: never, installed: never })).toEqual({
      driver: "direct",
    });
    expect(() => chooseDriver({ SEXTANT_SANDBOX_DRIVER: "none" }, { works: never, installed: never })).toThrow(
      "SEXTANT_SANDBOX_DRIVER is `none`: it is `bubblewrap` (the default) or `direct`.",
    );
  });
});

describe("the local edge's state", () => {
  it("is in a directory only its user can enter, holding nothing others can read", async () => {
    // Keys and orgs are in D1, and a task's first request has its Durable Objects written.
    await createTask(direct);
    expect(mode(off.persistTo)).toBe(0o700);
    for (const edge of [off, direct]) {
      const state = join(edge.persistTo, "v3");
      expect(mode(state)).toBe(0o700);
      expect(readdirSync(state)).toEqual(expect.arrayContaining(["d1", "do"]));
      expect(openToOthers(state)).toEqual([]);
    }
    // What an older npm start left readable is made private; the directory it names keeps its mode.
    expect(mode(join(oldState, "v3", "r2", "blob"))).toBe(0o600);
    expect(mode(oldState)).toBe(0o755);
  });
});
