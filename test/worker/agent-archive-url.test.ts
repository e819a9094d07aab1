/**
 * `POST /v1/agents/tasks` with `source: "archive"` under the edge's default settings: a URL whose
 * host is loopback, private, link-local or a local name, in any spelling the URL parser takes, is
 * refused before any task is made. (Fetching, redirects and the allowed origins of a local edge are
 * in test/e2e/agent-archive.test.ts.)
 */
import { createExecutionContext, env, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { archiveUrlRefusal, isPublicHost } from "../../protocol/agents/archive-url.js";
import worker from "../../workers/index.js";
import { call, createAccount, expectProblem, ORIGIN } from "./harness.js";

const NOT_PUBLIC = [
  "http://127.0.0.1:8000/a.tar.gz",
  "http://localhost:8000/a.tar.gz",
  "http://[::1]:8000/a.tar.gz",
  "https://localhost/a.tar.gz",
  "https://LOCALHOST./a.tar.gz",
  "https://api.localhost/a.tar.gz",
  "https://127.0.0.1/a.tar.gz",
  "https://127.255.255.254/a.tar.gz",
  "https://2130706433/a.tar.gz",
  "https://0x7f.1/a.tar.gz",
  "https://0x7f000001/a.tar.gz",
  "https://0177.0.0.01/a.tar.gz",
  "https://127.1/a.tar.gz",
  "https://%31%32%37.0.0.1/a.tar.gz",
  "https://0.0.0.0/a.tar.gz",
  "https://0/a.tar.gz",
  "https://10.0.0.1/a.tar.gz",
  "https://172.16.5.4/a.tar.gz",
  "https://192.168.0.1/a.tar.gz",
  "https://169.254.169.254/latest/meta-data/",
  "https://[::1]/a.tar.gz",
  "https://[0:0:0:0:0:0:0:1]/a.tar.gz",
  "https://[::]/a.tar.gz",
  "https://[::ffff:127.0.0.1]/a.tar.gz",
  "https://[::ffff:169.254.169.254]/a.tar.gz",
  "https://[::ffff:7f00:1]/a.tar.gz",
  "https://[::127.0.0.1]/a.tar.gz",
  "https://[64:ff9b::7f00:1]/a.tar.gz",
  "https://[2002:7f00:1::]/a.tar.gz",
  "https://[fe80::1]/a.tar.gz",
  "https://[fc00::1]/a.tar.gz",
  "https://[fdff:ffff::1]/a.tar.gz",
  "https://intranet/a.tar.gz",
  "https://nas.local/a.tar.gz",
  "https://metadata.google.internal/computeMetadata/v1/",
  "https://router.home.arpa/a.tar.gz",
];

const createTask = (token: string, url: string) =>
  call("/v1/agents/tasks", { token, body: { prompt: "x", source: "archive", archive: { url } } });

describe("an agent task's archive URL", () => {
  it("is refused with a 400 naming archive.url when its host is not public, however it is spelt", async () => {
    const { key } = await createAccount();
    for (const url of NOT_PUBLIC) {
      const problem = await expectProblem(await createTask(key.key, url), 400, "invalid_request");
      expect(problem.errors, url).toEqual([{ path: "archive.url", message: expect.stringMatching(/public host/) }]);
    }
  });

  it("is refused over plain http, with credentials, or in another scheme", async () => {
    const { key } = await createAccount();
    for (const url of [
      "http://example.com/a.tar.gz",
      "https://user:pw@example.com/a.tar.gz",
      "https://token@example.com/a.tar.gz",
      "ftp://example.com/a.tar.gz",
      "file:///etc/passwd",
      "data:application/gzip;base64,H4sI",
    ]) {
      const problem = await expectProblem(await createTask(key.key, url), 400, "invalid_request");
      expect(problem.errors?.[0]?.path, url).toMatch(/^archive\.url/);
    }
  });

  it("passes for https on a public host, which the edge then needs a sandbox host for", async () => {
    const { key } = await createAccount();
    for (const url of [
      "https://github.com/acme/widgets/archive/HEAD.tar.gz",
      "https://1.1.1.1/a.tar.gz",
      "https://[2606:4700:4700::1111]/a.tar.gz",
      "https://codeload.github.com./acme/widgets/tar.gz/HEAD",
    ]) {
      // No SANDBOX_URL in these tests: past the URL's check, the edge has nowhere to run the task.
      await expectProblem(await createTask(key.key, url), 503, "unavailable");
    }
  });

  it("lets through only the origins ALLOW_PRIVATE_ARCHIVE_ORIGINS names, and the default names none", async () => {
    expect((env as unknown as Record<string, unknown>).ALLOW_PRIVATE_ARCHIVE_ORIGINS).toBeUndefined();
    const { key } = await createAccount();
    const allowing = { ...env, ALLOW_PRIVATE_ARCHIVE_ORIGINS: "http://127.0.0.1:8000, http://localhost:9000" };
    const send = async (url: string, settings: Env) => {
      const ctx = createExecutionContext();
      const response = await worker.fetch(
        new Request(`${ORIGIN}/v1/agents/tasks`, {
          method: "POST",
          headers: { Authorization: `Bearer ${key.key}`, "Content-Type": "application/json" },
          body: JSON.stringify({ prompt: "x", source: "archive", archive: { url } }),
        }),
        settings,
        ctx,
      );
      await waitOnExecutionContext(ctx);
      return response;
    };
    await expectProblem(await send("http://127.0.0.1:8000/a.tar.gz", allowing as Env), 503, "unavailable");
    await expectProblem(await send("http://2130706433:8000/a.tar.gz", allowing as Env), 503, "unavailable");
    await expectProblem(await send("http://localhost:9000/a.tar.gz", allowing as Env), 503, "unavailable");
    await expectProblem(await send("http://127.0.0.1:8001/a.tar.gz", allowing as Env), 400, "invalid_request");
    await expectProblem(await send("http://[::1]:8000/a.tar.gz", allowing as Env), 400, "invalid_request");
    await expectProblem(await send("http://127.0.0.1:8000/a.tar.gz", env), 400, "invalid_request");
    // A setting that is not a list of origins fails loudly, without saying what it holds.
    const broken = { ...env, ALLOW_PRIVATE_ARCHIVE_ORIGINS: "127.0.0.1:8000" } as Env;
    const problem = await expectProblem(await send("https://example.com/a.tar.gz", broken), 500, "internal");
    expect(problem.detail).not.toContain("127.0.0.1");
  });

  it("is judged on the host as the runtime's URL parser reads it", () => {
    for (const url of NOT_PUBLIC) expect(isPublicHost(new URL(url).hostname), url).toBe(false);
    for (const host of ["example.com", "github.com", "8.8.8.8", "[2001:4860:4860::8888]", "172.32.0.1", "192.169.0.1"])
      expect(isPublicHost(host), host).toBe(true);
    expect(archiveUrlRefusal(new URL("https://example.com/a.tar.gz"))).toBeUndefined();
  });
});
