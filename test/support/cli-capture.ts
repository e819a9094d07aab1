import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, vi } from "vitest";

/**
 * For CLI tests that run `main()` in this process: captures stdout (stderr is silenced), keeps any
 * real `sextant login` on this machine out of the way with a fresh config directory, and undoes
 * every stub after each test. Returns a reader of what was printed.
 */
export function captureCli(): () => string {
  let stdout = "";
  beforeEach(async () => {
    stdout = "";
    vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
      stdout += String(chunk);
      return true;
    });
    vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    vi.stubEnv("SEXTANT_CONFIG_DIR", await mkdtemp(join(tmpdir(), "sextant-cli-")));
  });
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllEnvs();
    vi.unstubAllGlobals();
  });
  return () => stdout;
}

/** A stand-in edge for `fetch`: answers every request with `body` and records what was asked. */
export function stubEdge(body: unknown): { method: string; url: URL }[] {
  const requests: { method: string; url: URL }[] = [];
  vi.stubGlobal("fetch", async (input: RequestInfo | URL, init?: RequestInit) => {
    requests.push({ method: init?.method ?? "GET", url: new URL(String(input)) });
    return new Response(JSON.stringify(body), { headers: { "Content-Type": "application/json" } });
  });
  return requests;
}
