import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { AbuseThrottle, listOf } from "../../protocol/schemas.js";
import {
  activeAccountThrottle,
  activePrefixThrottle,
  liftThrottle,
  listThrottles,
  recordThrottle,
  type RecordThrottleInput,
} from "../../workers/db/abuse.js";
import { database } from "../../workers/db/client.js";
import { adminCall, createAccount, expectJson, expectProblem } from "./harness.js";

const MINUTE = 60_000;
const db = () => database(env.DB);
let prefixes = 0;

/** A prefix no other test in this file uses, so each test owns its limiter object. */
const freshPrefix = () => `198.51.${++prefixes}.0/24`;
const limiter = (prefix: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`ip:${prefix}`));

function record(overrides: Partial<RecordThrottleInput> = {}) {
  return recordThrottle(db(), {
    kind: "prefix",
    subject: freshPrefix(),
    signal: "active_free_accounts",
    observed: 41,
    threshold: 40,
    reason: "41 free accounts active in an hour (threshold 40)",
    expiresAt: Date.now() + 10 * MINUTE,
    ...overrides,
  });
}

const list = async (query = "") =>
  (await expectJson(await adminCall(`/abuse${query}`), 200, listOf(AbuseThrottle))).data;
const lift = (id: string) => adminCall(`/abuse/${id}/lift`, { method: "POST" });

describe("GET /admin/abuse", () => {
  it("lists only active throttles by default, and every state with all=true, newest first", async () => {
    const expired = await record({ expiresAt: Date.now() - 1 });
    const lifted = await record();
    await liftThrottle(db(), lifted.id);
    const active = await record({ kind: "account", subject: "usr_someone", signal: "key_creations" });

    const current = await list();
    expect(current.map((t) => t.id)).toContain(active.id);
    expect(current.map((t) => t.id)).not.toContain(expired.id);
    expect(current.map((t) => t.id)).not.toContain(lifted.id);
    expect(current.every((t) => t.active)).toBe(true);
    expect(await list("?all=false")).toEqual(current);

    const all = await list("?all=true");
    const ids = all.map((t) => t.id);
    expect(ids.indexOf(active.id)).toBeLessThan(ids.indexOf(lifted.id));
    expect(ids.indexOf(lifted.id)).toBeLessThan(ids.indexOf(expired.id));
    expect(all.find((t) => t.id === expired.id)).toMatchObject({ active: false, liftedAt: null });
    expect(all.find((t) => t.id === lifted.id)?.active).toBe(false);
    expect(all.find((t) => t.id === active.id)).toEqual({ ...active, active: true });
  });

  it("returns 400 for an unknown query parameter or a value of all other than true or false", async () => {
    const problem = await expectProblem(await adminCall("/abuse?state=active"), 400, "invalid_request");
    expect(problem.errors?.length).toBeGreaterThan(0);
    await expectProblem(await adminCall("/abuse?all=yes"), 400, "invalid_request");
  });
});

describe("POST /admin/abuse/{id}/lift", () => {
  it("lifts a throttle once and returns the same record when lifted again", async () => {
    const throttle = await record();
    expect(throttle).toMatchObject({ active: true, liftedAt: null });
    const lifted = await expectJson(await lift(throttle.id), 200, AbuseThrottle);
    expect(lifted.active).toBe(false);
    expect(Date.parse(lifted.liftedAt!)).toBeGreaterThanOrEqual(Date.parse(throttle.createdAt));
    expect(await expectJson(await lift(throttle.id), 200, AbuseThrottle)).toEqual(lifted);
    expect((await list()).map((t) => t.id)).not.toContain(throttle.id);
  });

  it("returns 404 for an unknown throttle", async () => {
    await expectProblem(await lift("abt_missing"), 404, "not_found");
  });

  it("clears the throttle in the prefix's limiter object", async () => {
    const throttle = await record();
    const stub = limiter(throttle.subject);
    await stub.setThrottle("x", Date.now() + MINUTE);
    expect((await stub.lease([])).throttle).toMatchObject({ reason: "x" });
    await expectJson(await lift(throttle.id), 200, AbuseThrottle);
    expect(await stub.lease([])).toEqual({ grants: [], throttle: null });
  });

  it("leaves the prefix throttled by another throttle on it that is still active", async () => {
    const prefix = freshPrefix();
    const older = await record({ subject: prefix, reason: "older", expiresAt: Date.now() + 30 * MINUTE });
    const newer = await record({ subject: prefix, reason: "newer" });
    const stub = limiter(prefix);
    await stub.setThrottle(newer.reason, Date.parse(newer.expiresAt));
    await expectJson(await lift(newer.id), 200, AbuseThrottle);
    expect((await stub.lease([])).throttle).toEqual({ reason: "older", until: Date.parse(older.expiresAt) });
    await expectJson(await lift(older.id), 200, AbuseThrottle);
    expect((await stub.lease([])).throttle).toBeNull();
  });

  it("lifts an account throttle without touching any limiter object", async () => {
    const account = await createAccount();
    const throttle = await record({ kind: "account", subject: account.user.id, orgId: account.org.id });
    const lifted = await expectJson(await lift(throttle.id), 200, AbuseThrottle);
    expect(lifted).toMatchObject({ kind: "account", orgId: account.org.id, active: false });
  });
});

describe("active throttle lookups", () => {
  it("finds the newest active throttle on an account, and none once it is lifted or expired", async () => {
    const userId = `usr_${crypto.randomUUID()}`;
    const now = Date.now();
    expect(await activeAccountThrottle(db(), userId, now)).toBeNull();
    const first = await record({ kind: "account", subject: userId, expiresAt: now + 5 * MINUTE });
    const second = await record({ kind: "account", subject: userId, expiresAt: now + 10 * MINUTE });
    expect((await activeAccountThrottle(db(), userId, now))?.id).toBe(second.id);

    await liftThrottle(db(), second.id, now);
    expect((await activeAccountThrottle(db(), userId, now))?.id).toBe(first.id);
    // Past the first one's expiry, nothing is active.
    expect(await activeAccountThrottle(db(), userId, now + 5 * MINUTE)).toBeNull();
    // Lookups are per kind: a prefix with the same subject is not an account.
    expect(await activePrefixThrottle(db(), userId, now)).toBeNull();
  });

  it("keeps the first lift time when lifted twice and returns null for an unknown id", async () => {
    const throttle = await record();
    const first = await liftThrottle(db(), throttle.id, Date.now());
    const again = await liftThrottle(db(), throttle.id, Date.now() + MINUTE);
    expect(again?.liftedAt).toBe(first?.liftedAt);
    expect(await liftThrottle(db(), "abt_nothing")).toBeNull();
  });

  it("lists the active ones as of the given time", async () => {
    const throttle = await record({ expiresAt: Date.now() + MINUTE });
    const ids = async (now: number) => (await listThrottles(db(), { now })).map((t) => t.id);
    expect(await ids(Date.now())).toContain(throttle.id);
    expect(await ids(Date.now() + 2 * MINUTE)).not.toContain(throttle.id);
  });
});
