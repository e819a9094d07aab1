/**
 * What `npm start`'s local stack keeps from the rest of the machine: agent tasks run under
 * bubblewrap or, without it, not at all (the edge says how to install it) unless the operator names
 * the `direct` driver, which the console then says loudly. A `bwrap` that cannot make namespaces
 * (as where user namespaces are off) stands in for a machine without a working bubblewrap.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
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

const createTask = (edge: LocalEdge) =>
  rawCall(edge, savedLocalEdge(edge).apiKey, "POST", "/v1/agents/tasks", { prompt: "Fix it." });

let off: LocalEdge;
let direct: LocalEdge;
beforeAll(async () => {
  const PATH = `${brokenBubblewrap()}:${process.env.PATH}`;
  [off, direct] = await Promise.all([
    startLocalEdge({ env: { PATH, SEXTANT_SANDBOX_DRIVER: undefined } }),
    startLocalEdge({ env: { PATH, SEXTANT_SANDBOX_DRIVER: "direct" } }),
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
