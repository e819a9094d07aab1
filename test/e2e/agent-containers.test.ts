/**
 * `SANDBOX_HOSTS = "containers"`: a task's sandbox host is a Cloudflare Container of its own, reached
 * through the `SANDBOX_CONTAINER` binding. Containers need Docker (locally) or Cloudflare (deployed),
 * neither of which runs here: these tests check that the edge goes to the task's container and says
 * clearly when it cannot start one, and that a wrong setting is refused before any task is made. An
 * environment session goes to its own container too, when its task set names where its archive is
 * published (there is no shared host to have sent the archive to).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rawCall } from "../support/agent-stack.js";
import { savedLocalEdge, startLocalEdge, type LocalEdge } from "../support/local-edge.js";

let containers: LocalEdge;
let bogus: LocalEdge;
const token = "container-token-0123456789";

beforeAll(async () => {
  [containers, bogus] = await Promise.all([
    // One task at a time for the org: a failed start must give its reservation back for the next to be tried.
    startLocalEdge({
      vars: {
        SANDBOX_HOSTS: "containers",
        SANDBOX_TOKEN: token,
        AGENT_LIMITS: JSON.stringify({ business: { concurrentTasks: 1, dailySandboxSeconds: 100_000 } }),
      },
    }),
    startLocalEdge({ vars: { SANDBOX_HOSTS: "kubernetes", SANDBOX_TOKEN: token } }),
  ]);
});
afterAll(async () => {
  await Promise.all([containers?.stop(), bogus?.stop()]);
});

const create = (edge: LocalEdge) =>
  rawCall(edge, savedLocalEdge(edge).apiKey, "POST", "/v1/agents/tasks", { prompt: "Fix it." });

describe("sandbox hosts in Cloudflare Containers", () => {
  it("goes to the task's own container, and answers 503 with why when none can start", async () => {
    const r = await create(containers);
    expect([r.status, r.type]).toEqual([503, "application/problem+json"]);
    const problem = r.json as { code: string; detail: string };
    expect(problem.code).toBe("unavailable");
    // The Container class's own answer: the task object went to its container, which cannot start here.
    expect(problem.detail).toContain("Containers have not been enabled for this Durable Object class");
    // The org may run one task at a time: the failed one gave its reservation back, so the next is
    // tried (503 again) rather than refused for the quota (429).
    const again = await create(containers);
    expect([again.status, (again.json as { code: string }).code]).toEqual([503, "unavailable"]);
    expect(containers.output()).not.toMatch(/Uncaught|internal_error/);
  });

  it("opens a session in the session's own container when its task has an archive URL, and says why not when not", async () => {
    const key = savedLocalEdge(containers).apiKey;
    const sha256 = "ab".repeat(32);
    const set = await rawCall(containers, key, "POST", "/v1/envs/tasksets", {
      tasks: [
        { sha256, bytes: 100, url: `https://tasks.example.com/${sha256}.tar.gz` },
        { sha256, bytes: 100 },
      ],
    });
    expect(set.status, JSON.stringify(set.json)).toBe(201);
    const id = (set.json as { id: string }).id;
    // With a URL: the session's object went to its own container (which cannot start here) to make the sandbox.
    const withUrl = await rawCall(containers, key, "POST", "/v1/envs/sessions", { taskset: id, task: 0 });
    expect([withUrl.status, (withUrl.json as { code: string }).code]).toEqual([503, "unavailable"]);
    expect((withUrl.json as { detail: string }).detail).toContain(
      "Containers have not been enabled for this Durable Object class",
    );
    // Without one there is no host that could hold the archive: the task set must name where it is.
    const without = await rawCall(containers, key, "POST", "/v1/envs/sessions", { taskset: id, task: 1 });
    expect([without.status, (without.json as { code: string }).code]).toEqual([409, "conflict"]);
    expect((without.json as { detail: string }).detail).toContain("--archive-base-url");
    const put = await fetch(`${containers.baseURL}/v1/envs/archives/${sha256}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
      body: new Uint8Array(100),
    });
    expect(put.status).toBe(503);
    expect(await put.text()).toContain("--archive-base-url");
    expect(containers.output()).not.toMatch(/Uncaught|internal_error/);
  });

  it("refuses a SANDBOX_HOSTS it does not know, naming the setting", async () => {
    const r = await create(bogus);
    expect([r.status, (r.json as { code: string }).code]).toEqual([503, "unavailable"]);
    expect((r.json as { detail: string }).detail).toContain("SANDBOX_HOSTS is `kubernetes`");
  });
});
