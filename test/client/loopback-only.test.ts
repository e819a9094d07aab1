/**
 * `npm test` needs no network beyond loopback. A test's own connections are refused past it
 * (test/support/loopback-only.ts, set up for every Node test file); what the tests start as other
 * processes is read from the test tree: none names the eval's downloaders or runs a package manager
 * that fetches. Downloads belong to `npm run eval`, `npm run eval:secrets` and `npm run train:data`.
 */
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { isLoopback, REFUSED } from "../support/loopback-only.js";

const ROOT = new URL("../../", import.meta.url).pathname;
const SELF = relative(ROOT, new URL(import.meta.url).pathname);

/** Why a connection failed, from fetch's error or its cause; a response if it did not fail. */
async function failure(url: string): Promise<string> {
  const result = await fetch(url, { signal: AbortSignal.timeout(20_000) }).catch((err: Error) => err);
  if (result instanceof Response) return `answered ${result.status}`;
  return (result.cause as Error | undefined)?.message ?? result.message;
}

describe("a test's own connections", () => {
  it("are refused past loopback, naming where they were going, before anything leaves the machine", async () => {
    expect(await failure("https://registry.npmjs.org/semver")).toBe(`${REFUSED}: a test tried registry.npmjs.org:443.`);
    // TEST-NET-1: nothing answers there, so only the refusal can end this at once.
    expect(await failure("http://192.0.2.1:8080/")).toBe(`${REFUSED}: a test tried 192.0.2.1:8080.`);
  });

  it("reach this machine by address and by name", async () => {
    const server = createServer((_, res) => res.end("here"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    try {
      for (const host of ["127.0.0.1", "localhost"]) {
        const response = await fetch(`http://${host}:${port}/`);
        expect(await response.text()).toBe("here");
      }
    } finally {
      server.close();
    }
  });

  it("tell loopback from elsewhere", () => {
    for (const host of [undefined, "localhost", "127.0.0.1", "127.8.9.10", "::1", "[::1]", "::ffff:127.0.0.1"])
      expect(isLoopback(host), String(host)).toBe(true);
    for (const host of ["registry.npmjs.org", "10.0.0.1", "0.0.0.0", "::", "[fe80::1]", "localhost.example.com"])
      expect(isLoopback(host), host).toBe(false);
  });
});

/** Every TypeScript file under test/, as its path from the repository root. */
function testTree(dir = join(ROOT, "test")): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return testTree(path);
    return entry.name.endsWith(".ts") ? [relative(ROOT, path)] : [];
  });
}

/** What in a test file would download from a registry, in this process or one it starts. */
const DOWNLOADS: [what: string, pattern: RegExp][] = [
  ["the eval's downloaders (eval/fetch.ts, eval/debian.ts)", /\b(fetchTarball|fetchDeb|measurePrecision)\b/],
  // A run, not a mention: a package manager started with a subcommand that resolves from a registry
  // (as a process's command and arguments, or in a shell line), unless it runs `--offline`. Quoting
  // the README's `npm install && npm start` in an assertion, or packing a local folder, fetches nothing.
  [
    "a package manager that fetches",
    /\b\w+\(\s*["'`](npm|npx|pnpm|yarn)["'`]\s*,\s*\[\s*["'`](view|info|install|ci|add|i|exec|dlx)["'`](?![^\]]*--offline)|\b(exec|execSync|spawn|spawnSync)\(\s*["'`](?:[^"'`]*[;&|]\s*)?(npm|npx|pnpm|yarn)\s+(view|info|install|ci|add|i|exec|dlx)\b(?![^"'`]*--offline)|\bpip3?["'`]?\s*,?\s*\[?\s*["'`]?install\b/,
  ],
  ["a fetch of a remote URL", /(?<![\w.$])fetch\(\s*["'`]https?:\/\/(?!127\.|localhost|\[::1\])/],
];

describe("the test tree", () => {
  it("names no download from a registry or any other remote host", () => {
    const files = testTree().filter((file) => file !== SELF);
    expect(files.length).toBeGreaterThan(100);
    const found = files.flatMap((file) => {
      const text = readFileSync(join(ROOT, file), "utf8");
      return DOWNLOADS.filter(([, pattern]) => pattern.test(text)).map(([what]) => `${file}: ${what}`);
    });
    expect(found).toEqual([]);
  });

  it("tells a package manager's run that fetches from one that does not, and from a mention", () => {
    const fetches = (text: string) => DOWNLOADS.some(([, pattern]) => pattern.test(text));
    for (const run of [
      'spawnSync("npm", ["install", "left-pad"])',
      'run("npm", ["ci", "--no-audit"], dir)',
      "execSync(`npm view sextant version`)",
      'spawn("npx", ["exec", "cowsay"])',
      'execSync("cd x && pnpm add zod")',
      'spawnSync("pip3", ["install", "requests"])',
    ])
      expect(fetches(run), run).toBe(true);
    for (const mention of [
      'run("npm", ["ci", "--offline", "--ignore-scripts"], dir)',
      'run("npm", ["pack", "-w", "client", "--pack-destination", dest], cwd)',
      'expect(README).toContain("npm install && npm start");',
      "// Rule 1, `npm install`: left out, since CI has already installed from the lockfile",
      'spawnSync("npx", ["tsc", "-p", "tsconfig.json"])',
    ])
      expect(fetches(mention), mention).toBe(false);
  });

  it("would name the test that downloaded the secret corpus, as it once did", () => {
    const old = 'const result = await measurePrecision(SMOKE);\nawait fetch("https://registry.npmjs.org/semver");';
    expect(DOWNLOADS.filter(([, pattern]) => pattern.test(old)).map(([what]) => what)).toEqual([
      "the eval's downloaders (eval/fetch.ts, eval/debian.ts)",
      "a fetch of a remote URL",
    ]);
  });
});
