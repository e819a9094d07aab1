import { describe, expect, it } from "vitest";
import { adminCall, call, createAccount, expectJson, type Account } from "./harness.js";
import { CreatedApiKey, User } from "../../protocol/schemas.js";
import { LimitLedger, inParallel } from "../support/limit-ledger.js";

/**
 * The limiter under concurrent traffic through the real Worker and real limiter objects: many
 * keys of several orgs, two classes, tight limits per key, user and org. Every answer is checked
 * against the test's own count of what each limit has served: nothing over a limit, no refusal
 * while the refused limit still had quota (counting requests still in flight as spending it), and
 * every 429 saying truthfully when its limit is back. Windows are a day long, so refill during
 * the test is a small fraction of one request.
 */
const DAY = 86_400;
const LIMITS = {
  admin: { key: 12, org: 30 },
  index: { key: 20, user: 30, org: 45 },
} as const;
type Cls = keyof typeof LIMITS;
const ROUTES: Record<Cls, string> = { admin: "/v1/me", index: "/v1/workspaces" };
/**
 * The test pool's `SELF.fetch` costs more with every request an isolate has served (the edge under
 * `npm start` does not), so this run is kept to 600; `test/e2e/limits-concurrency.test.ts` sends
 * 2,000 through the local edge, the gateway classes included.
 */
const REQUESTS = 600;

const overrides = Object.fromEntries(
  Object.entries(LIMITS).map(([cls, scopes]) => [
    cls,
    Object.fromEntries(
      Object.entries(scopes).map(([scope, limit]) => [scope, { requests: { limit, windowSeconds: DAY } }]),
    ),
  ]),
);

interface Caller {
  key: string;
  ids: { key: string; user: string; org: string };
}

/** An org with `users` users of `keysPerUser` keys each, its limits overridden. */
async function org(users: number, keysPerUser: number, limits: unknown): Promise<Caller[]> {
  const first: Account = await createAccount({ plan: "business" });
  const patched = await adminCall(`/orgs/${first.org.id}`, { method: "PATCH", body: { limits } });
  expect(patched.status).toBe(200);
  const callers: Caller[] = [];
  for (let u = 0; u < users; u++) {
    const user =
      u === 0
        ? first.user
        : await expectJson(
            await adminCall(`/orgs/${first.org.id}/users`, {
              body: { email: `c${u}-${crypto.randomUUID()}@example.com`, role: "member" },
            }),
            201,
            User,
          );
    for (let k = 0; k < keysPerUser; k++) {
      const key =
        u === 0 && k === 0
          ? first.key
          : await expectJson(
              await adminCall("/keys", { body: { userId: user.id, name: `k${u}.${k}` } }),
              201,
              CreatedApiKey,
            );
      callers.push({ key: key.key, ids: { key: key.id, user: user.id, org: first.org.id } });
    }
  }
  return callers;
}

describe("the limiter under concurrency", () => {
  it("never refuses a burst well inside the limits", async () => {
    const minute = (limit: number) => ({ requests: { limit, windowSeconds: 60 } });
    // The business plan's defaults.
    const [caller] = await org(1, 1, { admin: { key: minute(240) }, index: { key: minute(1_200) } });
    const me = await Promise.all(Array.from({ length: 10 }, () => call("/v1/me", { token: caller!.key })));
    expect(me.map((r) => r.status)).toEqual(Array(10).fill(200));
    const lists = await Promise.all(Array.from({ length: 40 }, () => call("/v1/workspaces", { token: caller!.key })));
    expect(lists.map((r) => r.status)).toEqual(Array(40).fill(200));
    const remaining = Number(
      lists
        .at(-1)!
        .headers.get("RateLimit")
        ?.match(/;r=(\d+);/)?.[1],
    );
    expect(remaining).toBeGreaterThan(1_100);
    for (let round = 0; round < 5; round++) {
      const rounds = await Promise.all(Array.from({ length: 10 }, () => call("/v1/me", { token: caller!.key })));
      expect(rounds.map((r) => r.status)).toEqual(Array(10).fill(200));
    }
  }, 30_000);

  it("says when a spent limit is back: a request after Retry-After is served", async () => {
    const [caller] = await org(1, 1, { admin: { key: { requests: { limit: 2, windowSeconds: 4 } } } });
    const me = () => call("/v1/me", { token: caller!.key });
    let refused: Response | undefined;
    for (let i = 0; i < 5 && !refused; i++) {
      const r = await me();
      if (r.status === 429) refused = r;
      else expect(r.status).toBe(200);
    }
    expect(refused?.status).toBe(429);
    const seconds = Number(refused!.headers.get("Retry-After"));
    expect(seconds).toBeGreaterThanOrEqual(1);
    expect(seconds).toBeLessThanOrEqual(2);
    expect(refused!.headers.get("RateLimit")).toBe(`"admin-key";r=0;t=${seconds}`);
    await new Promise((r) => setTimeout(r, seconds * 1000));
    expect((await me()).status).toBe(200);
  }, 30_000);
  it("serves nothing over any limit, refuses only spent limits, and says truthfully when each is back", async () => {
    const callers = [...(await org(2, 2, overrides)), ...(await org(3, 1, overrides)), ...(await org(1, 2, overrides))];
    expect(callers.length).toBeGreaterThanOrEqual(8);
    const ledger = new LimitLedger(0x9e3779b9);
    const limitOf = (name: string) => {
      const [cls, scope] = name.slice(0, name.indexOf(":")).split("-") as [Cls, string];
      return (LIMITS[cls] as Record<string, number>)[scope]!;
    };
    const started = Date.now();

    await inParallel(REQUESTS, 16, async () => {
      const caller = callers[ledger.random(callers.length)]!;
      const cls: Cls = ledger.random(2) === 0 ? "admin" : "index";
      const scopes = Object.keys(LIMITS[cls]) as (keyof Caller["ids"])[];
      const limits = scopes.map((scope) => `${cls}-${scope}:${caller.ids[scope]}`);
      ledger.sent(limits);
      const response = await call(ROUTES[cls], { token: caller.key });
      const text = await response.text();
      ledger.answered(limits, response.status);
      if (response.status === 200) return;
      if (response.status !== 429 || !response.headers.get("X-Request-Id")) {
        ledger.violations.push(`${response.status}: ${text.slice(0, 200)}`);
        return;
      }
      const { limit: policy } = JSON.parse(text) as { limit: string };
      const scope = policy.slice(cls.length + 1) as keyof Caller["ids"];
      const name = `${policy}:${caller.ids[scope]}`;
      ledger.refusedByRequests(
        name,
        limitOf(name),
        DAY,
        response.headers.get("RateLimit"),
        response.headers.get("Retry-After"),
      );
    });

    const refill = (Date.now() - started) / 1000 / DAY;
    ledger.checkServed(limitOf, (name) => limitOf(name) * refill);
    expect(ledger.violations).toEqual([]);
    // Each caller sends enough to spend every limit, so exactly the orgs' capacity is served:
    // admin 30 + 30 + 24 (two keys of 12), index 45 + 45 + 30 (one user's 30).
    expect(ledger.statuses.get(200)).toBe(204);
    expect(ledger.statuses.get(429)).toBe(REQUESTS - 204);
  }, 120_000);
});
