import { env } from "cloudflare:test";
import fc from "fast-check";
import { afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { CreatedApiKey, UsageReport } from "../../protocol/schemas.js";
import { flushUsage, meter, type UsageEntry } from "../../workers/gateway/metering.js";
import { call, createAccount, expectJson, expectProblem, type Account } from "./harness.js";

interface Sums {
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

const dayOf = (at: number) => new Date(at).toISOString().slice(0, 10);
const cell = (day: string, keyId: string, model: string) => `${day}|${keyId}|${model}`;

/** What `usage_daily` must hold after `entries`, by day, key and model. */
function expected(entries: UsageEntry[]): Map<string, Sums> {
  const sums = new Map<string, Sums>();
  for (const e of entries) {
    const id = cell(dayOf(e.at), e.keyId, e.model);
    const s = sums.get(id) ?? { requests: 0, promptTokens: 0, completionTokens: 0 };
    s.requests += 1;
    s.promptTokens += e.promptTokens;
    s.completionTokens += e.completionTokens;
    sums.set(id, s);
  }
  return sums;
}

/** What `usage_daily` holds for these keys, read straight from D1. */
async function stored(keyIds: string[]): Promise<Map<string, Sums>> {
  const { results } = await env.DB.prepare(
    `SELECT day, key_id, model, requests, prompt_tokens, completion_tokens FROM usage_daily
     WHERE key_id IN (${keyIds.map(() => "?").join(",")})`,
  )
    .bind(...keyIds)
    .all<{
      day: string;
      key_id: string;
      model: string;
      requests: number;
      prompt_tokens: number;
      completion_tokens: number;
    }>();
  return new Map(
    results.map((r) => [
      cell(r.day, r.key_id, r.model),
      { requests: r.requests, promptTokens: r.prompt_tokens, completionTokens: r.completion_tokens },
    ]),
  );
}

/** A stand-in for `ctx.waitUntil` that lets the test wait for exactly what the runtime would. */
function executionContext() {
  const promises: Promise<unknown>[] = [];
  return {
    waitUntil: (p: Promise<unknown>) => void promises.push(p),
    settled: () => Promise.all(promises),
    /** How many promises `waitUntil` was given. */
    pending: () => promises.length,
  };
}

const entryFor = (account: Account, overrides: Partial<UsageEntry> = {}): UsageEntry => ({
  orgId: account.org.id,
  userId: account.user.id,
  keyId: account.key.id,
  model: "sextant-fast",
  promptTokens: 100,
  completionTokens: 10,
  at: Date.UTC(2026, 2, 1, 12),
  ...overrides,
});

const MIDNIGHT = Date.UTC(2026, 4, 2);

describe("usage metering", () => {
  let account: Account;
  beforeAll(async () => {
    account = await createAccount();
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("writes the exact sums per UTC day, key and model across a day boundary", async () => {
    const keys = [account.key.id, `${account.key.id}-second`];
    const models = ["sextant-fast", "sextant-large"];
    const times = [MIDNIGHT - 1, MIDNIGHT];
    const entries: UsageEntry[] = [];
    for (let i = 0; i < 240; i++) {
      entries.push(
        entryFor(account, {
          keyId: keys[i % 2]!,
          model: models[Math.floor(i / 2) % 2]!,
          at: times[Math.floor(i / 4) % 2]!,
          promptTokens: 1000 + i * 7,
          completionTokens: i * 3,
        }),
      );
    }
    const ctx = executionContext();
    for (const e of entries) meter(env, ctx.waitUntil, e);
    await flushUsage(env);

    const rows = await stored(keys);
    expect(rows).toEqual(expected(entries));
    expect(rows.size).toBe(8);
    expect([...rows.keys()].some((k) => k.startsWith("2026-05-01|"))).toBe(true);
    expect([...rows.keys()].some((k) => k.startsWith("2026-05-02|"))).toBe(true);
    await ctx.settled();
  });

  it("writes entries metered during a running flush in a follow-up that their waitUntil covers", async () => {
    const keyId = `${account.key.id}-follow-up`;
    const ctx = executionContext();
    const first = entryFor(account, { keyId, promptTokens: 1 });
    meter(env, ctx.waitUntil, first, 0);
    const running = flushUsage(env);
    // A flush is in flight; these arrive while it runs.
    const later = [2, 3, 4].map((n) => entryFor(account, { keyId, promptTokens: n, model: `m${n % 2}` }));
    for (const e of later) meter(env, ctx.waitUntil, e, 0);
    await Promise.all([ctx.settled(), running]);
    expect(await stored([keyId])).toEqual(expected([first, ...later]));
  });

  it("never loses or double-counts an entry, whatever the interleaving of meters and flushes", async () => {
    let run = 0;
    const action = fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          key: fc.integer({ min: 0, max: 2 }),
          model: fc.constantFrom("a", "b"),
          at: fc.constantFrom(MIDNIGHT - 1, MIDNIGHT, MIDNIGHT + 3_600_000),
          promptTokens: fc.nat(100_000),
          completionTokens: fc.nat(100_000),
        }),
      },
      { weight: 1, arbitrary: fc.constant("flush" as const) },
      { weight: 2, arbitrary: fc.constant("yield" as const) },
    );
    await fc.assert(
      fc.asyncProperty(fc.array(action, { maxLength: 60 }), async (actions) => {
        const keys = [0, 1, 2].map((k) => `key_prop${++run}_${k}`);
        // Each entry comes from a request of its own, as in the gateway.
        const contexts: ReturnType<typeof executionContext>[] = [];
        const entries: UsageEntry[] = [];
        const flushes: Promise<void>[] = [];
        for (const a of actions) {
          if (a === "flush") flushes.push(flushUsage(env));
          else if (a === "yield") await new Promise((resolve) => setTimeout(resolve, 0));
          else {
            const entry = entryFor(account, { ...a, keyId: keys[a.key]! });
            entries.push(entry);
            const ctx = executionContext();
            contexts.push(ctx);
            meter(env, ctx.waitUntil, entry, 0);
          }
        }
        // No final flushUsage: what the runtime waits for must be enough.
        await Promise.all([...contexts.map((ctx) => ctx.settled()), ...flushes]);
        expect(await stored(keys)).toEqual(expected(entries));
      }),
      { numRuns: 40 },
    );
  });

  it("gives the requests of one flush one timer and one waitUntil, and writes every entry", async () => {
    const keyId = `${account.key.id}-one-timer`;
    const entries = Array.from({ length: 20 }, (_, i) => entryFor(account, { keyId, promptTokens: i + 1 }));
    const contexts = entries.map(() => executionContext());
    entries.forEach((e, i) => meter(env, contexts[i]!.waitUntil, e));
    expect(contexts.map((c) => c.pending())).toEqual([1, ...entries.slice(1).map(() => 0)]);
    await contexts[0]!.settled();
    expect(await stored([keyId])).toEqual(expected(entries));
  });

  it("drops the usage of an org deleted since the request without failing the rest of the batch", async () => {
    const ctx = executionContext();
    const kept = entryFor(account, { keyId: "key_of_live_org" });
    meter(env, ctx.waitUntil, entryFor(account, { orgId: "org_deleted", keyId: "key_of_deleted_org" }));
    meter(env, ctx.waitUntil, kept);
    await ctx.settled();
    expect(await stored(["key_of_live_org", "key_of_deleted_org"])).toEqual(expected([kept]));
  });

  it("puts the rows of a failed flush back, logs only a count, and writes them with the next flush", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const keyId = `${account.key.id}-retry`;
    const first = entryFor(account, { keyId, promptTokens: 5, completionTokens: 6 });
    const second = entryFor(account, { keyId, promptTokens: 7, completionTokens: 8 });
    // A real D1 failure, not a mocked binding: the table is briefly missing.
    await env.DB.exec("ALTER TABLE usage_daily RENAME TO usage_daily_away");
    try {
      const ctx = executionContext();
      meter(env, ctx.waitUntil, first);
      await ctx.settled();
    } finally {
      await env.DB.exec("ALTER TABLE usage_daily_away RENAME TO usage_daily");
    }
    expect(errors).toHaveBeenCalledTimes(1);
    const line = String(errors.mock.calls[0]![0]);
    expect(JSON.parse(line)).toEqual({ level: "error", message: "usage flush failed", rows: 1 });
    expect(await stored([keyId])).toEqual(new Map());

    const ctx = executionContext();
    meter(env, ctx.waitUntil, second);
    await ctx.settled();
    expect(await stored([keyId])).toEqual(expected([first, second]));
  });

  it("counts a bad upstream token figure as zero rather than poisoning the batch", async () => {
    const keyId = `${account.key.id}-nan`;
    const ctx = executionContext();
    meter(env, ctx.waitUntil, entryFor(account, { keyId, promptTokens: Number.NaN, completionTokens: 2.9 }));
    await ctx.settled();
    expect(await stored([keyId])).toEqual(
      expected([entryFor(account, { keyId, promptTokens: 0, completionTokens: 2 })]),
    );
  });
});

describe("GET /v1/usage", () => {
  let owner: Account;
  let member: Account;
  let memberSecondKey: CreatedApiKey;
  let stranger: Account;

  // Days well in the past, so that the default window never sees them.
  const D1 = Date.UTC(2025, 0, 10, 9);
  const D2 = Date.UTC(2025, 0, 11, 9);
  const RANGE = "from=2025-01-01&to=2025-01-31";

  beforeAll(async () => {
    owner = await createAccount({ role: "owner" });
    member = await createAccount({ role: "member", org: owner.org });
    memberSecondKey = await expectJson(
      await call("/v1/keys", { token: member.key.key, body: { name: "second" } }),
      201,
      CreatedApiKey,
    );
    stranger = await createAccount({ role: "owner" });
    const ctx = executionContext();
    const record = (a: Account, e: Partial<UsageEntry>) => meter(env, ctx.waitUntil, entryFor(a, e));
    record(owner, { model: "large", at: D1, promptTokens: 100, completionTokens: 10 });
    record(member, { model: "small", at: D1, promptTokens: 20, completionTokens: 2 });
    record(member, { model: "small", at: D2, promptTokens: 30, completionTokens: 3 });
    record(member, { keyId: memberSecondKey.id, model: "small", at: D2, promptTokens: 40, completionTokens: 4 });
    record(stranger, { model: "small", at: D1, promptTokens: 1000, completionTokens: 100 });
    await ctx.settled();
  });

  const report = async (account: Account, query: string) =>
    expectJson(await call(`/v1/usage?${query}`, { token: account.key.key }), 200, UsageReport);

  it("returns 401 without a key and for an unknown or malformed one", async () => {
    await expectProblem(await call("/v1/usage"), 401, "unauthenticated");
    await expectProblem(await call("/v1/usage", { token: "sxt_short" }), 401, "unauthenticated");
    await expectProblem(await call("/v1/usage", { token: `sxt_${"0".repeat(46)}` }), 401, "unauthenticated");
  });

  it.each([
    ["an impossible date", "from=2025-02-30"],
    ["a date that is not YYYY-MM-DD", "to=2025-1-31"],
    ["a word for a date", "from=yesterday"],
    ["from after to", "from=2025-02-01&to=2025-01-31"],
    ["an unknown dimension", "groupBy=day,org"],
    ["an empty groupBy", "groupBy="],
    ["an unknown parameter", "group_by=day"],
  ])("returns 400 for %s", async (_, query) => {
    await expectProblem(await call(`/v1/usage?${query}`, { token: owner.key.key }), 400, "invalid_request");
  });

  it("returns 400 for a range over 366 days and accepts one of exactly 366", async () => {
    await expectProblem(
      await call("/v1/usage?from=2024-01-01&to=2025-01-01", { token: owner.key.key }),
      400,
      "invalid_request",
    );
    const leap = await report(owner, "from=2024-01-01&to=2024-12-31");
    expect([leap.from, leap.to]).toEqual(["2024-01-01", "2024-12-31"]);
  });

  it("shows an owner the whole org, grouped by day and model by default", async () => {
    const r = await report(owner, RANGE);
    expect(r.groupBy).toEqual(["day", "model"]);
    expect(r.rows).toEqual([
      { day: "2025-01-10", model: "large", requests: 1, promptTokens: 100, completionTokens: 10, totalTokens: 110 },
      { day: "2025-01-10", model: "small", requests: 1, promptTokens: 20, completionTokens: 2, totalTokens: 22 },
      { day: "2025-01-11", model: "small", requests: 2, promptTokens: 70, completionTokens: 7, totalTokens: 77 },
    ]);
    expect(r.totals).toEqual({ requests: 4, promptTokens: 190, completionTokens: 19, totalTokens: 209 });
  });

  it("shows a member only their own usage, from every one of their keys", async () => {
    const r = await report(member, `${RANGE}&groupBy=user,key`);
    expect(r.rows.map((row) => [row.userId, row.keyId, row.requests])).toEqual(
      [
        [member.user.id, member.key.id, 2],
        [member.user.id, memberSecondKey.id, 1],
      ].sort((a, b) => String(a[1]).localeCompare(String(b[1]))),
    );
    expect(r.totals).toEqual({ requests: 3, promptTokens: 90, completionTokens: 9, totalTokens: 99 });
  });

  it("never shows another org's usage", async () => {
    const mine = await report(owner, `${RANGE}&groupBy=user,key,model,day`);
    const ids = mine.rows.flatMap((row) => [row.userId, row.keyId]);
    expect(ids).not.toContain(stranger.user.id);
    expect(ids).not.toContain(stranger.key.id);
    const theirs = await report(stranger, RANGE);
    expect(theirs.totals).toEqual({ requests: 1, promptTokens: 1000, completionTokens: 100, totalTokens: 1100 });
  });

  it("groups by the dimensions asked for, in their order, with only those fields present", async () => {
    const byModel = await report(owner, `${RANGE}&groupBy=model`);
    expect(byModel.rows).toEqual([
      { model: "large", requests: 1, promptTokens: 100, completionTokens: 10, totalTokens: 110 },
      { model: "small", requests: 3, promptTokens: 90, completionTokens: 9, totalTokens: 99 },
    ]);
    const byUserThenDay = await report(owner, `${RANGE}&groupBy=user,day,user`);
    expect(byUserThenDay.groupBy).toEqual(["user", "day"]);
    const expectedUsers = [
      [owner.user.id, "2025-01-10", 1],
      [member.user.id, "2025-01-10", 1],
      [member.user.id, "2025-01-11", 2],
    ].sort((a, b) => String(a[0]).localeCompare(String(b[0])) || String(a[1]).localeCompare(String(b[1])));
    expect(byUserThenDay.rows.map((row) => [row.userId, row.day, row.requests])).toEqual(expectedUsers);
    expect(Object.keys(byUserThenDay.rows[0]!).sort()).toEqual(
      ["completionTokens", "day", "promptTokens", "requests", "totalTokens", "userId"].sort(),
    );
  });

  it("reports only the days asked for, inclusive", async () => {
    const r = await report(owner, "from=2025-01-11&to=2025-01-11&groupBy=day");
    expect(r.rows).toEqual([
      { day: "2025-01-11", requests: 2, promptTokens: 70, completionTokens: 7, totalTokens: 77 },
    ]);
  });

  it("defaults to the last 30 days through today, UTC", async () => {
    const fresh = await createAccount();
    const ctx = executionContext();
    meter(env, ctx.waitUntil, entryFor(fresh, { at: Date.now(), promptTokens: 5, completionTokens: 1 }));
    meter(env, ctx.waitUntil, entryFor(fresh, { at: Date.now() - 30 * 86_400_000, promptTokens: 9 }));
    await ctx.settled();
    const r = await report(fresh, "");
    const today = dayOf(Date.now());
    expect(r.to).toBe(today);
    expect(r.from).toBe(dayOf(Date.parse(today) - 29 * 86_400_000));
    expect(r.totals).toEqual({ requests: 1, promptTokens: 5, completionTokens: 1, totalTokens: 6 });
  });
});
