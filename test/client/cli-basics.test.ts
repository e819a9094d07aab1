import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import { ROOT, sextant } from "../support/local-edge.js";

/** The CLI's own behaviour where no edge is needed: its exit codes, messages and help. */
describe("the sextant CLI without an edge", () => {
  const config = () => ({ SEXTANT_CONFIG_DIR: mkdtempSync(join(tmpdir(), "sextant-cli-")) });

  it("ends quietly, with success, when the reader of its output goes away (`| head -1`)", async () => {
    const child = spawn(process.execPath, [join(ROOT, "client/bin/sextant.js"), "keys", "--help"], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...config() },
    });
    // Close the read end before the CLI writes: every write then fails with EPIPE.
    child.stdout.destroy();
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
    expect(stderr).not.toMatch(/EPIPE|Error/);
    expect(code).toBe(0);
  });

  it("says so when logout finds nothing to remove", () => {
    const env = config();
    const out = sextant(["logout"], env);
    expect(out.code).toBe(0);
    expect(out.stdout).toMatch(/^Not logged in: there was no .*credentials\.json\.$/m);
    expect(JSON.parse(sextant(["--json", "logout"], env).stdout)).toEqual({ loggedOut: true, removed: false });
  });

  it("refuses a malformed key at login as a usage error (exit 2), before asking any edge", () => {
    const key = generateApiKey();
    const typo = key.slice(0, -1) + (key.endsWith("a") ? "b" : "a");
    const out = sextant(["login", "--base-url", "http://127.0.0.1:1", "--api-key", typo], config());
    expect(out.code).toBe(2);
    expect(out.stderr).toContain("not a Sextant API key");
  });

  it("lists the global options in a subcommand's help", () => {
    const out = sextant(["keys", "create", "--help"], config());
    expect(out.code).toBe(0);
    expect(out.stdout).toContain("--expires");
    expect(out.stdout).toContain("--base-url");
    expect(out.stdout).toContain("--json");
  });
});
