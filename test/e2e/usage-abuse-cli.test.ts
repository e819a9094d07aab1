/**
 * `sextant usage` and `sextant admin abuse` run as the real CLI against `npm start`'s edge, after
 * traffic that this file causes: completions through the gateway (metered per day, key and model),
 * keys created faster than the abuse thresholds allow, and new free accounts from one network. The
 * counts they print are the ones caused here, read back through the edge's own storage.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import { AbuseThrottle, CreatedApiKey, Me, UsageReport, type UsageRow } from "../../protocol/schemas.js";
import { LOCAL_MODELS } from "../../scripts/local-gateway.js";
import { rawCall } from "../support/agent-stack.js";
import {
  ROOMY_LIMITS,
  savedLocalEdge,
  sextantAsync,
  startLocalEdge,
  type CliResult,
  type LocalEdge,
} from "../support/local-edge.js";

const KEYS_PER_HOUR = 2;
const NEW_FREE_ACCOUNTS = 2;
/** Roomy limits, but abuse thresholds this file crosses on purpose. */
const RATE_LIMITS = JSON.stringify({
  ...JSON.parse(ROOMY_LIMITS),
  abuse: {
    keyCreationsPerUserPerHour: KEYS_PER_HOUR,
    newFreeAccountsPerPrefixPerHour: NEW_FREE_ACCOUNTS,
    activeFreeAccountsPerPrefixPerHour: 1_000_000,
  },
});

let edge: LocalEdge;
beforeAll(async () => {
  edge = await startLocalEdge({ vars: { RATE_LIMITS } });
});
afterAll(async () => {
  await edge?.stop();
});

// Asynchronous: a synchronous spawn would stall this process's event loop, and with it the
// keep-alive sockets its own requests to the edge reuse.
/** The CLI with the local edge's saved key and admin secret, as after `npm start`. */
const cli = (args: string[]) => sextantAsync(args, { SEXTANT_CONFIG_DIR: edge.configDir });

const utcDay = () => new Date().toISOString().slice(0, 10);

function ok(result: CliResult, what: string): CliResult {
  if (result.code !== 0) throw new Error(`sextant ${what} exited ${result.code}: ${result.stderr}`);
  return result;
}

/** `sextant --json …` with the local edge's saved key and admin secret; must succeed. */
const json = async (...args: string[]): Promise<unknown> =>
  JSON.parse(ok(await cli(["--json", ...args]), args.join(" ")).stdout);

/** The CLI with an explicit key and no saved edge to fall back on. */
const asKey = (key: string, args: string[]) => sextantAsync(["--base-url", edge.baseURL, "--api-key", key, ...args]);

/** The CLI with a config directory that holds nothing: no key, no admin secret. */
const unconfigured = (args: string[]) =>
  sextantAsync(args, { SEXTANT_CONFIG_DIR: mkdtempSync(join(tmpdir(), "sextant-empty-config-")) });

/** Runs `read` until `done` holds of its result (metering and abuse records are written after the response). */
async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what} never came; last: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

async function createUser(orgId: string, email: string, role: "owner" | "member") {
  const user = (await json("admin", "users", "create", "--org", orgId, "--email", email, "--role", role)) as {
    id: string;
  };
  const key = CreatedApiKey.parse(await json("admin", "keys", "create", "--user", user.id, "--name", email));
  return { userId: user.id, key };
}

async function createOrg(name: string, plan: "free" | "pro"): Promise<string> {
  return ((await json("admin", "orgs", "create", name, "--plan", plan)) as { id: string }).id;
}

describe("sextant usage against npm start's edge", () => {
  const CHAT = { model: LOCAL_MODELS.chat, maxTokens: 5 };
  const TAB = { model: LOCAL_MODELS.tab, maxTokens: 4 };
  const MEMBER_CHAT_TOKENS = 2;

  /** What the gateway told each caller it used, per key and model, summed here. */
  const sent: { keyId: string; userId: string; model: string; prompt: number; completion: number }[] = [];

  async function chat(key: string, ids: { keyId: string; userId: string }, maxTokens: number) {
    const openai = new OpenAI({ baseURL: `${edge.baseURL}/v1`, apiKey: key, maxRetries: 0 });
    const completion = await openai.chat.completions.create({
      model: CHAT.model,
      messages: [{ role: "user", content: "Count for me." }],
      max_tokens: maxTokens,
    });
    // The simulator writes until max_tokens: each request's completion tokens are known before it is sent.
    expect(completion.usage?.completion_tokens).toBe(maxTokens);
    sent.push({ ...ids, model: CHAT.model, prompt: completion.usage!.prompt_tokens, completion: maxTokens });
  }

  async function tab(key: string, ids: { keyId: string; userId: string }) {
    const openai = new OpenAI({ baseURL: `${edge.baseURL}/v1`, apiKey: key, maxRetries: 0 });
    const completion = await openai.completions.create({
      model: TAB.model,
      prompt: "def add(a, b):\n    ",
      suffix: "\n\nprint(add(1, 2))\n",
      max_tokens: TAB.maxTokens,
    });
    expect(completion.usage?.completion_tokens).toBe(TAB.maxTokens);
    sent.push({ ...ids, model: TAB.model, prompt: completion.usage!.prompt_tokens, completion: TAB.maxTokens });
  }

  /** The rows a report grouped by `field` must hold for the traffic in `of`, in the edge's order. */
  function expectedRows(of: typeof sent, field: "model" | "keyId" | "userId"): UsageRow[] {
    const rows = new Map<string, UsageRow>();
    for (const s of of) {
      const row = rows.get(s[field]) ?? {
        [field]: s[field],
        requests: 0,
        promptTokens: 0,
        completionTokens: 0,
        totalTokens: 0,
      };
      row.requests++;
      row.promptTokens += s.prompt;
      row.completionTokens += s.completion;
      row.totalTokens += s.prompt + s.completion;
      rows.set(s[field], row);
    }
    return [...rows.values()].sort((a, b) => (a[field]! < b[field]! ? -1 : 1));
  }

  const totalsOf = (rows: UsageRow[]) => ({
    requests: rows.reduce((n, r) => n + r.requests, 0),
    promptTokens: rows.reduce((n, r) => n + r.promptTokens, 0),
    completionTokens: rows.reduce((n, r) => n + r.completionTokens, 0),
    totalTokens: rows.reduce((n, r) => n + r.totalTokens, 0),
  });

  let from = "";
  let to = "";
  let dev: Me;
  let second: CreatedApiKey;
  let member: { userId: string; key: CreatedApiKey };
  let owner: UsageReport;

  it("reports to the org's owner, by model, exactly the requests and tokens the gateway metered", async () => {
    from = utcDay();
    dev = Me.parse(await json("whoami"));
    const { apiKey } = savedLocalEdge(edge);
    second = CreatedApiKey.parse(await json("keys", "create", "usage-second"));
    member = await createUser(dev.org.id, "member@usage.dev", "member");

    for (let i = 0; i < 3; i++) await chat(apiKey, { keyId: dev.key.id, userId: dev.user.id }, CHAT.maxTokens);
    for (let i = 0; i < 2; i++) await tab(second.key, { keyId: second.id, userId: dev.user.id });
    await chat(member.key.key, { keyId: member.key.id, userId: member.userId }, MEMBER_CHAT_TOKENS);
    expect(sent).toHaveLength(6);

    const byModel = async () =>
      UsageReport.parse(await json("usage", "--by", "model", "--from", from, "--to", (to = utcDay())));
    owner = await eventually(byModel, (r) => r.totals.requests >= sent.length, "the metered usage");
    const rows = expectedRows(sent, "model");
    expect(rows.map((r) => [r.model, r.requests, r.completionTokens])).toEqual([
      [LOCAL_MODELS.chat, 4, 3 * CHAT.maxTokens + MEMBER_CHAT_TOKENS],
      [LOCAL_MODELS.tab, 2, 2 * TAB.maxTokens],
    ]);
    expect(owner).toEqual({ from, to, groupBy: ["model"], rows, totals: totalsOf(rows) });
  });

  it("groups by key and by user, and shows a member only their own usage", async () => {
    const byKey = UsageReport.parse(await json("usage", "--by", "key", "--from", from, "--to", to));
    const keyRows = expectedRows(sent, "keyId");
    expect(keyRows.map((r) => r.requests).sort()).toEqual([1, 2, 3]);
    expect(byKey).toEqual({ from, to, groupBy: ["key"], rows: keyRows, totals: owner.totals });

    const byUser = UsageReport.parse(await json("usage", "--by", "user", "--from", from, "--to", to));
    expect(byUser.rows).toEqual(expectedRows(sent, "userId"));

    const asMember = await asKey(member.key.key, ["--json", "usage", "--by", "model,key", "--from", from, "--to", to]);
    expect(asMember.code, asMember.stderr).toBe(0);
    const own = sent.filter((s) => s.keyId === member.key.id);
    const prompt = own[0]!.prompt;
    expect(UsageReport.parse(JSON.parse(asMember.stdout))).toEqual({
      from,
      to,
      groupBy: ["model", "key"],
      rows: [
        {
          model: LOCAL_MODELS.chat,
          keyId: member.key.id,
          requests: 1,
          promptTokens: prompt,
          completionTokens: MEMBER_CHAT_TOKENS,
          totalTokens: prompt + MEMBER_CHAT_TOKENS,
        },
      ],
      totals: { requests: 1, promptTokens: prompt, completionTokens: 2, totalTokens: prompt + 2 },
    });
  });

  it("prints the same counts as a table, the totals last", async () => {
    const human = ok(await cli(["usage", "--by", "model", "--from", from, "--to", to]), "usage");
    const lines = human.stdout.trimEnd().split("\n");
    const [chatRow, tabRow] = owner.rows;
    const t = owner.totals;
    expect(lines).toHaveLength(7);
    expect(lines[0]).toBe(`Usage from ${from} to ${to} (UTC), by model`);
    expect(lines[1]).toBe("");
    expect(lines[2]).toMatch(/^MODEL\s+REQUESTS\s+PROMPT\s+COMPLETION\s+TOTAL$/);
    const row = (r: UsageRow) =>
      new RegExp(`^${r.model}\\s+${r.requests}\\s+${r.promptTokens}\\s+${r.completionTokens}\\s+${r.totalTokens}$`);
    expect(lines[3]).toMatch(row(chatRow!));
    expect(lines[4]).toMatch(row(tabRow!));
    expect(lines[5]).toBe("");
    expect(lines[6]).toBe(
      `Total: ${t.requests} requests, ${t.totalTokens} tokens (${t.promptTokens} prompt, ${t.completionTokens} completion)`,
    );
  });

  it("refuses without a key, with a malformed key and with an unknown key, saying why", async () => {
    const none = await unconfigured(["--base-url", edge.baseURL, "usage"]);
    expect([none.code, none.stdout]).toEqual([2, ""]);
    expect(none.stderr).toBe(
      `error: No API key for ${edge.baseURL}. Run \`npm start\` for a local edge, \`sextant login\`, or set SEXTANT_API_KEY.\n`,
    );

    const malformed = await asKey("sk-nope", ["usage"]);
    expect([malformed.code, malformed.stdout]).toEqual([2, ""]);
    expect(malformed.stderr).toBe(
      "error: The API key is malformed: Sextant keys look like `sxt_` followed by 46 letters and digits.\n",
    );

    const unknown = await asKey(generateApiKey(), ["usage"]);
    expect([unknown.code, unknown.stdout]).toEqual([3, ""]);
    expect(unknown.stderr).toMatch(
      /^error: Authentication required: The API key is not recognised\. \[unauthenticated, request \S+\]\n$/,
    );
    const unknownJson = await asKey(generateApiKey(), ["--json", "usage"]);
    expect(unknownJson.code).toBe(3);
    expect(JSON.parse(unknownJson.stderr).error).toMatchObject({ status: 401, code: "unauthenticated" });
  });
});

describe("sextant admin abuse against npm start's edge", () => {
  const NETWORK = "203.0.113.0/24";
  let keysUser: string;
  let keysOrg: string;
  let account: AbuseThrottle;
  let prefix: AbuseThrottle;

  const list = async (...flags: string[]) =>
    AbuseThrottle.array().parse(await json("admin", "abuse", "list", ...flags));

  it("lists the account throttle that creating keys too fast earns, and the prefix throttle of new free accounts", async () => {
    expect(await list()).toEqual([]);

    // A user creating one key more than the hourly threshold allows: the last is refused.
    keysOrg = await createOrg("Key churn", "pro");
    const churner = await createUser(keysOrg, "churn@abuse.dev", "owner");
    keysUser = churner.userId;
    for (let i = 1; i <= KEYS_PER_HOUR; i++) {
      expect((await asKey(churner.key.key, ["keys", "create", `k${i}`])).code).toBe(0);
    }
    const refused = await asKey(churner.key.key, ["keys", "create", "one-too-many"]);
    expect(refused.code).toBe(5);
    expect(refused.stderr).toContain(`Rate limit reached: ${KEYS_PER_HOUR} new API keys per hour per user.`);

    // One more new free account than the threshold sends traffic from one network. Cloudflare's
    // front sets CF-Connecting-IP; `npm start` has none, so the test sets what it would.
    for (let i = 0; i <= NEW_FREE_ACCOUNTS; i++) {
      const { key } = await createUser(await createOrg(`Free ${i}`, "free"), `free${i}@abuse.dev`, "owner");
      const me = await rawCall(edge, key.key, "GET", "/v1/me", undefined, {
        "CF-Connecting-IP": `203.0.113.${10 + i}`,
      });
      expect(me.status).toBe(200);
    }

    const found = await eventually(
      () => list(),
      (l) => l.length >= 2,
      "both throttles",
    );
    expect(found).toHaveLength(2);
    [prefix, account] = found as [AbuseThrottle, AbuseThrottle];
    const iso = expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(account).toEqual({
      id: expect.stringMatching(/^abt_/),
      kind: "account",
      subject: keysUser,
      orgId: keysOrg,
      signal: "key_creations",
      observed: KEYS_PER_HOUR + 1,
      threshold: KEYS_PER_HOUR,
      reason: `more than ${KEYS_PER_HOUR} API keys created within an hour`,
      createdAt: iso,
      expiresAt: iso,
      liftedAt: null,
      active: true,
    });
    expect(prefix).toEqual({
      id: expect.stringMatching(/^abt_/),
      kind: "prefix",
      subject: NETWORK,
      orgId: null,
      signal: "new_free_accounts",
      observed: NEW_FREE_ACCOUNTS + 1,
      threshold: NEW_FREE_ACCOUNTS,
      reason: `${NEW_FREE_ACCOUNTS + 1} new free accounts from ${NETWORK} within an hour (threshold ${NEW_FREE_ACCOUNTS})`,
      createdAt: iso,
      expiresAt: iso,
      liftedAt: null,
      active: true,
    });
  });

  it("prints them as a table, newest first, with the observed count over the threshold", async () => {
    const human = ok(await cli(["admin", "abuse", "list"]), "admin abuse list");
    const lines = human.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^ID\s+KIND\s+SUBJECT\s+SIGNAL\s+OBSERVED\s+CREATED\s+EXPIRES\s+STATE\s+REASON$/);
    const minute = (iso: string) => iso.replace("T", " ").slice(0, 16);
    const row = (t: AbuseThrottle) =>
      [t.id, t.kind, t.subject, t.signal, `${t.observed}/${t.threshold}`, minute(t.createdAt), minute(t.expiresAt)]
        .concat(["active", t.reason])
        .join(" ");
    expect(lines[1]!.replace(/ {2,}/g, " ")).toBe(row(prefix));
    expect(lines[2]!.replace(/ {2,}/g, " ")).toBe(row(account));
    expect(lines[1]).toContain(`${NEW_FREE_ACCOUNTS + 1}/${NEW_FREE_ACCOUNTS}`);
  });

  it("lifts a throttle, which then leaves the default list and shows as lifted with --all", async () => {
    const lifted = ok(await cli(["admin", "abuse", "lift", account.id]), "admin abuse lift");
    const at = /^Lifted (\S+) on account (\S+) at (\S+)\.\n$/.exec(lifted.stdout);
    expect(at?.slice(1, 3)).toEqual([account.id, keysUser]);
    const liftedAt = at![3]!;

    expect(await list()).toEqual([prefix]);
    expect(await list("--all")).toEqual([prefix, { ...account, liftedAt, active: false }]);
    // Lifting again changes nothing: the record keeps its first lift.
    expect(await json("admin", "abuse", "lift", account.id)).toEqual({ ...account, liftedAt, active: false });
  });

  it("refuses without an admin secret, with a wrong one, and for a throttle that does not exist", async () => {
    const none = await unconfigured(["--base-url", edge.baseURL, "admin", "abuse", "list"]);
    expect([none.code, none.stdout]).toEqual([2, ""]);
    expect(none.stderr).toBe(
      `error: No admin secret for ${edge.baseURL}: pass --admin-secret or set SEXTANT_ADMIN_SECRET.\n`,
    );

    const wrong = ["--base-url", edge.baseURL, "--admin-secret", "w".repeat(40)];
    const refused = await unconfigured([...wrong, "admin", "abuse", "list"]);
    expect([refused.code, refused.stdout]).toEqual([3, ""]);
    expect(refused.stderr).toMatch(/^error: Forbidden: The admin secret is not valid\. \[forbidden, request \S+\]\n$/);
    const refusedJson = await unconfigured([...wrong, "--json", "admin", "abuse", "list"]);
    expect(refusedJson.code).toBe(3);
    expect(JSON.parse(refusedJson.stderr).error).toMatchObject({
      status: 403,
      code: "forbidden",
      message: "Forbidden: The admin secret is not valid.",
    });

    const missing = await cli(["admin", "abuse", "lift", "abt_missing"]);
    expect([missing.code, missing.stdout]).toEqual([4, ""]);
    expect(missing.stderr).toMatch(
      /^error: Not found: No abuse throttle `abt_missing`\. \[not_found, request \S+\]\n$/,
    );
    // Nothing the refusals asked for changed the list.
    expect((await list("--all")).map((t) => t.id)).toEqual([prefix.id, account.id]);
  });
});
