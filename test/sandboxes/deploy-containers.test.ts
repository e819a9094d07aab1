/**
 * `npm run deploy -- --containers`: the configuration it deploys is `wrangler.toml` with the sandbox
 * host's container attached to the `SandboxContainer` class, which wrangler reads as valid, whose
 * image is the repository's, and whose class the Worker exports and binds. (Building the image needs
 * Docker, which does not run here; `wrangler deploy --dry-run` with it stops at that build.)
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { unstable_readConfig } from "wrangler";
import { containersConfig, ROOT } from "../../scripts/deploy.js";

const base = readFileSync(join(ROOT, "wrangler.toml"), "utf8");

describe("deploying with sandbox hosts in Cloudflare Containers", () => {
  it("writes wrangler.toml with the container attached, which wrangler reads as valid", () => {
    // Beside wrangler.toml, as the deploy writes it, so its relative paths mean the same.
    const path = join(ROOT, `.wrangler-containers-test-${process.pid}.toml`);
    writeFileSync(path, containersConfig(base, 7));
    let config: ReturnType<typeof unstable_readConfig>;
    try {
      config = unstable_readConfig({ config: path });
    } finally {
      rmSync(path, { force: true });
    }
    expect(config.containers).toHaveLength(1);
    const container = config.containers![0]!;
    expect(container.class_name).toBe("SandboxContainer");
    expect(container.max_instances).toBe(7);
    expect(existsSync(join(ROOT, "sandboxes/container/Dockerfile"))).toBe(true);
    expect(String(container.image)).toContain("sandboxes/container/Dockerfile");
    // The class has a binding and a migration, and the Worker exports it.
    expect(config.durable_objects.bindings).toContainEqual(
      expect.objectContaining({ name: "SANDBOX_CONTAINER", class_name: "SandboxContainer" }),
    );
    expect(config.migrations.flatMap((m: { new_sqlite_classes?: string[] }) => m.new_sqlite_classes ?? [])).toContain(
      "SandboxContainer",
    );
    expect(readFileSync(join(ROOT, "workers/index.ts"), "utf8")).toMatch(/export \{ SandboxContainer \}/);
    // Everything else is wrangler.toml's own.
    const plain = unstable_readConfig({ config: join(ROOT, "wrangler.toml") });
    expect(plain.containers ?? []).toEqual([]);
    expect(config.durable_objects).toEqual(plain.durable_objects);
    expect(config.vars).toEqual(plain.vars);
  });

  it("refuses a bad container count, and a configuration without the class", () => {
    expect(() => containersConfig(base, 0)).toThrow(/--max-containers/);
    expect(() => containersConfig(base, Number("many"))).toThrow(/--max-containers/);
    expect(() => containersConfig('name = "x"\n', 5)).toThrow(/SandboxContainer/);
  });
});
