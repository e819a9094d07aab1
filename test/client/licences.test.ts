/**
 * Every production dependency's licence is one scripts/licences.ts allows: the root package's
 * dependencies, each workspace package's, and all they pull in, read by license-checker-rseidelsohn
 * from the installed tree. A small tree written for the test shows that the check fails where it
 * should: copyleft and proprietary packages, one only a workspace depends on, and a guessed licence.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { isAllowed, POLICY, productionLicences, ROOT, summary, violations } from "../../scripts/licences.js";

const readJson = (path: string) => JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;

describe("the licence check", () => {
  it("allows every production package's licence, the client workspace's dependencies among them", async () => {
    const packages = await productionLicences();
    expect(violations(packages).map((p) => `${p.id} (${p.licence})`)).toEqual([]);
    // Nothing a package.json names as a production dependency goes unchecked.
    const root = readJson(join(ROOT, "package.json"));
    const manifests = [
      root,
      ...((root.workspaces as string[] | undefined) ?? []).map((w) => readJson(join(ROOT, w, "package.json"))),
    ];
    const names = new Set(packages.map((p) => p.name));
    for (const manifest of manifests) {
      expect(names).toContain(manifest.name);
      for (const dependency of Object.keys((manifest.dependencies as Record<string, string> | undefined) ?? {}))
        expect(names, `${manifest.name as string} depends on ${dependency}`).toContain(dependency);
    }
    // Sextant's own packages are checked under what their package.json says, not license-checker's UNLICENSED for a private one.
    expect(packages.find((p) => p.name === root.name)).toMatchObject({
      licence: "Apache-2.0",
      source: "own package.json",
    });
    expect(summary(packages).reduce((n, [, count]) => n + count, 0)).toBe(packages.length);
  }, 60_000);

  it("reads SPDX expressions exactly", () => {
    const allowed = ["MIT", "Apache-2.0", "Zlib", "Unlicense"];
    expect(isAllowed("MIT", allowed)).toBe(true);
    expect(isAllowed("mit", allowed)).toBe(true);
    expect(isAllowed("(MIT AND Zlib)", allowed)).toBe(true);
    expect(isAllowed("MIT OR GPL-3.0-only", allowed)).toBe(true);
    expect(isAllowed("GPL-3.0-only OR (Apache-2.0 AND MIT)", allowed)).toBe(true);
    expect(isAllowed("MIT AND GPL-3.0-only", allowed)).toBe(false);
    expect(isAllowed("GPL-3.0-only", allowed)).toBe(false);
    // No licence granted at all, however close its spelling to the public-domain Unlicense.
    expect(isAllowed("UNLICENSED", allowed)).toBe(false);
    expect(isAllowed("UNKNOWN", allowed)).toBe(false);
    expect(isAllowed("Apache-2.0 WITH LLVM-exception", allowed)).toBe(false);
    expect(isAllowed("Apache-2.0 WITH LLVM-exception", ["Apache-2.0 WITH LLVM-exception"])).toBe(true);
    for (const malformed of ["", "MIT OR", "(MIT", "MIT)", "MIT Apache-2.0", "SEE LICENSE IN LICENSE.md"])
      expect(isAllowed(malformed, allowed), malformed).toBe(false);
  });

  describe("over a tree with licences the policy does not allow", () => {
    const dir = mkdtempSync(join(tmpdir(), "sextant-licences-"));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const write = (path: string, contents: unknown) => {
      mkdirSync(join(dir, path, ".."), { recursive: true });
      writeFileSync(join(dir, path), typeof contents === "string" ? contents : JSON.stringify(contents));
    };
    const pkg = (name: string, fields: Record<string, unknown>) =>
      write(`node_modules/${name}/package.json`, { name, version: "1.0.0", ...fields });
    write("package.json", {
      name: "fixture",
      version: "1.0.0",
      private: true,
      license: "Apache-2.0",
      workspaces: ["client"],
      dependencies: { permissive: "1.0.0", copyleft: "1.0.0", proprietary: "1.0.0", guessed: "1.0.0" },
      devDependencies: { "dev-only": "1.0.0" },
    });
    write("client/package.json", {
      name: "fixture-cli",
      version: "1.0.0",
      license: "Apache-2.0",
      dependencies: { "client-only": "1.0.0" },
    });
    mkdirSync(join(dir, "node_modules"), { recursive: true });
    symlinkSync("../client", join(dir, "node_modules/fixture-cli"));
    pkg("permissive", { license: "MIT", dependencies: { nested: "1.0.0" } });
    pkg("nested", { license: "MIT OR GPL-3.0-only" });
    pkg("copyleft", { license: "GPL-3.0-only" });
    pkg("proprietary", { license: "UNLICENSED" });
    pkg("client-only", { license: "AGPL-3.0-only" });
    pkg("dev-only", { license: "GPL-3.0-only" });
    pkg("guessed", {});
    write("node_modules/guessed/LICENSE", readFileSync(join(ROOT, "node_modules/hono/LICENSE"), "utf8"));

    it("fails copyleft, proprietary and guessed licences, a workspace's own dependencies included, and no dev dependency", async () => {
      const packages = await productionLicences(dir);
      expect(packages.map((p) => p.id)).toEqual([
        "client-only@1.0.0",
        "copyleft@1.0.0",
        "fixture-cli@1.0.0",
        "fixture@1.0.0",
        "guessed@1.0.0",
        "nested@1.0.0",
        "permissive@1.0.0",
        "proprietary@1.0.0",
      ]);
      expect(violations(packages).map((p) => `${p.id} (${p.licence})`)).toEqual([
        "client-only@1.0.0 (AGPL-3.0-only)",
        "copyleft@1.0.0 (GPL-3.0-only)",
        "guessed@1.0.0 (UNKNOWN)",
        "proprietary@1.0.0 (UNLICENSED)",
      ]);
    }, 60_000);

    it("passes a guessed licence once the policy states it", async () => {
      const policy = {
        ...POLICY,
        clarified: { "guessed@1.0.0": { licence: "MIT", why: "Its LICENSE is the MIT text; package.json has none." } },
      };
      const guessed = (await productionLicences(dir, policy)).filter((p) => p.name === "guessed");
      expect(guessed).toMatchObject([{ licence: "MIT", source: "clarified" }]);
      expect(violations(guessed, policy)).toEqual([]);
    }, 60_000);
  });
});
