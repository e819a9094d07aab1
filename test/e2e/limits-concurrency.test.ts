import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tokenReserve } from "../../protocol/limits.js";
import { VIRGINIA, sleep, startGateway, type GatewayFixture } from "../support/gateway.js";
import { LimitLedger, inParallel } from "../support/limit-ledger.js";

/**
 * The limiter under concurrent traffic through the real local edge (`npm start`'s script), the
 * gateway classes driven by the `openai` SDK against a simulated backend (a stand-in for vLLM):
 * 2,000 requests, 16 at a time, from 9 keys of 3 orgs, in four classes with tight limits per key
 * and org (requests, and chat tokens). Every answer is checked against the test's own count of
 * what each limit has served. Windows are a day long, so refill during the test is negligible.
 */
const DAY = 86_400;
const day = (limit: number) => ({ limit, windowSeconds: DAY });
const LIMITS = {
  tab: { key: { requests: day(25) }, org: { requests: day(60) } },
  chat: { key: { requests: day(12) }, org: { tokens: day(300) } },
  admin: { key: { requests: day(10) }, org: { requests: day(25) } },
  index: { key: { requests: day(15) }, org: { requests: day(35) } },
} as const;
type Cls = keyof typeof LIMITS;
const CLASSES = Object.keys(LIMITS) as Cls[];

const CHAT = { model: "chat-sim", messages: [{ role: "user" as const, content: "x".repeat(28) }], max_tokens: 8 };
const RESERVE = tokenReserve(CHAT);

interface Caller {
  apiKey: string;
  ids: { key: string; org: string };
  openai: OpenAI;
}

describe("the limiter under concurrency, through the local edge", () => {
  let gw: GatewayFixture;

  beforeAll(async () => {
    gw = await startGateway(
      [{ id: "sim", models: ["sim-coder"], maxConcurrency: 256, ttftMs: 0, tokensPerSecond: 100_000 }],
      (urls) => {
        const endpoints = [
          {
            id: "sim",
            region: "us-east",
            ...VIRGINIA,
            url: urls.sim!,
            model: "sim-coder",
            kind: "vllm" as const,
            capacity: 128,
          },
        ];
        return {
          pools: {
            tab: { role: "tab", models: ["tab-sim"], fim: "qwen2.5-coder", endpoints },
            chat: { role: "chat", models: ["chat-sim"], endpoints },
          },
        };
      },
    );
  });

  afterAll(async () => {
    await gw?.stop();
  });

  async function org(users: number, keysPerUser: number, limits: object): Promise<Caller[]> {
    const first = await gw.account("business");
    await gw.admin.orgs.update(first.orgId, { limits });
    const callers: Caller[] = [];
    for (let u = 0; u < users; u++) {
      const userId =
        u === 0
          ? first.userId
          : (
              await gw.admin.users.create(first.orgId, {
                email: `c${u}-${crypto.randomUUID()}@example.com`,
                role: "member",
              })
            ).id;
      for (let k = 0; k < keysPerUser; k++) {
        const key =
          u === 0 && k === 0
            ? { key: first.apiKey, id: first.keyId }
            : await gw.admin.keys.create({ userId, name: `k${k}` });
        callers.push({
          apiKey: key.key,
          ids: { key: key.id, org: first.orgId },
          openai: gw.openai({ apiKey: key.key }),
        });
      }
    }
    return callers;
  }

  /** One request of a class; its status, the RateLimit fields and the tokens it used. */
  async function send(caller: Caller, cls: Cls) {
    try {
      if (cls === "tab" || cls === "chat") {
        const { data, response } =
          cls === "tab"
            ? await caller.openai.completions
                .create({ model: "tab-sim", prompt: "def f(", suffix: ")", max_tokens: 2 })
                .withResponse()
            : await caller.openai.chat.completions.create(CHAT).withResponse();
        return { status: response.status, headers: response.headers, tokens: data.usage?.total_tokens ?? 0, body: "" };
      }
      const response = await fetch(`${gw.edge.baseURL}${cls === "admin" ? "/v1/me" : "/v1/workspaces"}`, {
        headers: { Authorization: `Bearer ${caller.apiKey}` },
      });
      return { status: response.status, headers: response.headers, tokens: 0, body: await response.text() };
    } catch (err) {
      if (!(err instanceof OpenAI.APIError) || err.status === undefined) throw err;
      return { status: err.status, headers: err.headers ?? new Headers(), tokens: 0, body: err.message };
    }
  }

  it("serves nothing over any limit, refuses only spent limits, and says truthfully when each is back", async () => {
    const callers = [...(await org(2, 2, LIMITS)), ...(await org(3, 1, LIMITS)), ...(await org(1, 2, LIMITS))];
    expect(callers.length).toBeGreaterThanOrEqual(8);
    const ledger = new LimitLedger(0x2545f491);
    /** A limit's size: `<class>-[tokens-]<scope>:<id>`. */
    const limitOf = (name: string) => {
      const parts = name.slice(0, name.indexOf(":")).split("-");
      const limits = (
        LIMITS[parts[0] as Cls] as Record<string, { requests?: { limit: number }; tokens?: { limit: number } }>
      )[parts.at(-1)!]!;
      return (parts[1] === "tokens" ? limits.tokens : limits.requests)!.limit;
    };
    const isTokens = (name: string) => name.includes("-tokens-");
    const started = Date.now();

    await inParallel(2_000, 16, async () => {
      const caller = callers[ledger.random(callers.length)]!;
      const cls = CLASSES[ledger.random(CLASSES.length)]!;
      const limits = Object.entries(LIMITS[cls]).flatMap(([scope, kinds]) =>
        Object.keys(kinds).map(
          (kind) => `${cls}-${kind === "tokens" ? "tokens-" : ""}${scope}:${caller.ids[scope as "key" | "org"]}`,
        ),
      );
      ledger.sent(limits);
      const answer = await send(caller, cls);
      ledger.answered(limits, answer.status, (name) => (isTokens(name) ? answer.tokens : 1));
      if (answer.status === 200) return;
      const field = answer.headers.get("ratelimit");
      const policy = field?.match(/^"([a-z-]+)";r=(\d+);t=(\d+)$/);
      if (answer.status !== 429 || !policy) {
        ledger.violations.push(`${cls}: ${answer.status} ${field} ${answer.body.slice(0, 200)}`);
        return;
      }
      const [, refusedBy, left, t] = policy;
      const name = `${refusedBy}:${caller.ids[refusedBy!.split("-").at(-1) as "key" | "org"]}`;
      const retryAfter = answer.headers.get("retry-after");
      if (!isTokens(name)) {
        ledger.refusedByRequests(name, limitOf(name), DAY, field, retryAfter);
        return;
      }
      // A tokens limit refuses when what is left cannot cover the reservation. Served requests'
      // refunds may still be on their way, so one more reservation of slack is allowed.
      const limit = limitOf(name);
      const spent = (ledger.served.get(name) ?? 0) + (ledger.inflight.get(name) ?? 0) * RESERVE;
      if (spent + 2 * RESERVE <= limit)
        ledger.violations.push(`${name} refused with ${spent} of ${limit} tokens spent`);
      if (Number(left) >= RESERVE) ledger.violations.push(`${name} refused with ${left} tokens left`);
      if (t !== retryAfter || !(Number(t) >= 1 && Number(t) <= Math.ceil((RESERVE * DAY) / limit)))
        ledger.violations.push(`${name}: RateLimit ${field} with Retry-After ${retryAfter}`);
    });

    const refill = (Date.now() - started) / 1000 / DAY;
    // A tokens limit may be passed by at most one request's reservation.
    ledger.checkServed(limitOf, (name) => limitOf(name) * refill + (isTokens(name) ? RESERVE : 0));
    expect(ledger.violations).toEqual([]);
    expect([...ledger.statuses.keys()].sort()).toEqual([200, 429]);
    // Both answers many times, or the test shows nothing.
    expect(ledger.statuses.get(200)!).toBeGreaterThan(300);
    expect(ledger.statuses.get(429)!).toBeGreaterThan(500);
  }, 600_000);

  it.each([1, 8])("passes a tokens limit by at most one request's reservation, %i at a time", async (concurrency) => {
    const limit = 600;
    const [caller] = await org(1, 1, { chat: { key: { tokens: { limit, windowSeconds: 3_600 } } } });
    const body = { model: "chat-sim", messages: [{ role: "user" as const, content: "y".repeat(60) }], max_tokens: 100 };
    const reserve = tokenReserve(body);
    let spent = 0;
    const ask = async () => {
      try {
        const completion = await caller!.openai.chat.completions.create(body);
        spent += completion.usage!.total_tokens;
        return true;
      } catch (err) {
        if (!(err instanceof OpenAI.APIError) || err.status !== 429) throw err;
        return false;
      }
    };
    // Each sender stops at its first refusal (others' reservations may be what refused it).
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (await ask());
      }),
    );
    expect(spent).toBeLessThanOrEqual(limit + reserve);
    // Then one at a time, once every reservation is settled, until refused: a refusal with nothing
    // in flight means less than one reservation is left.
    await sleep(100);
    while (await ask()) await sleep(100);
    expect(spent).toBeLessThanOrEqual(limit + reserve);
    expect(spent).toBeGreaterThan(limit - reserve);
  });
});
