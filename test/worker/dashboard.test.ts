import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { DashboardData } from "../../protocol/dashboard.js";
import type { ErrorCode } from "../../protocol/errors.js";
import { quantileDisc } from "../../workers/dashboard/data.js";
import { SESSION_COOKIE, sessionToken, validSession } from "../../workers/dashboard/session.js";
import { adminCall, call, createAccount, expectProblem, ORIGIN } from "./harness.js";

const login = (secret: string, headers: Record<string, string> = {}) =>
  SELF.fetch(`${ORIGIN}/admin/dashboard/session`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams({ secret }).toString(),
    redirect: "manual",
  });

/** A sign-in's body as sent, with its content type (none when `type` is undefined). */
const signIn = (body: string | Uint8Array, type: string | undefined, headers: Record<string, string> = {}) =>
  SELF.fetch(`${ORIGIN}/admin/dashboard/session`, {
    method: "POST",
    headers: { ...(type === undefined ? {} : { "Content-Type": type }), ...headers },
    body,
    redirect: "manual",
  });

const logout = (headers: Record<string, string>) =>
  SELF.fetch(`${ORIGIN}/admin/dashboard/logout`, { method: "POST", headers, redirect: "manual" });

const WRONG = "not-the-admin-secret-at-all-0123456789";

describe("/admin/dashboard", () => {
  it("asks for the admin secret, signs in with a cookie, and serves the page with its data", async () => {
    const anonymous = await SELF.fetch(`${ORIGIN}/admin/dashboard`);
    expect(anonymous.status).toBe(200);
    const form = await anonymous.text();
    expect(form).toContain('name="secret"');
    expect(form).not.toContain("dashboard-data");

    const wrong = await login(WRONG);
    expect(wrong.status).toBe(403);
    expect(wrong.headers.get("Set-Cookie")).toBeNull();
    expect(await wrong.text()).toContain("not this edge&#39;s admin secret");

    const signedIn = await login(env.ADMIN_SECRET);
    expect(signedIn.status).toBe(303);
    expect(signedIn.headers.get("Location")).toBe("/admin/dashboard");
    const cookie = signedIn.headers.get("Set-Cookie")!;
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Strict/i);
    expect(cookie).toMatch(/Path=\/admin\/dashboard/);
    expect(cookie).not.toContain(env.ADMIN_SECRET);
    const session = cookie.split(";")[0]!;

    const page = await SELF.fetch(`${ORIGIN}/admin/dashboard?day=2026-01-02`, { headers: { Cookie: session } });
    expect(page.status).toBe(200);
    const csp = page.headers.get("Content-Security-Policy")!;
    expect(csp).toMatch(/script-src 'self' 'nonce-[0-9a-f]{32}'/);
    expect(csp).toContain("frame-ancestors 'none'");
    expect(page.headers.get("Cache-Control")).toBe("no-store");
    const html = await page.text();
    const data = JSON.parse(/<script type="application\/json" id="dashboard-data">(.*?)<\/script>/s.exec(html)![1]!);
    expect(data.day).toBe("2026-01-02");
    expect(data.tab.day).toMatchObject({ shown: 0, accepted: 0, acceptanceRate: null });

    // The cookie opens the dashboard's reads, not the admin API.
    expect((await SELF.fetch(`${ORIGIN}/admin/dashboard/data`, { headers: { Cookie: session } })).status).toBe(200);
    await expectProblem(
      await SELF.fetch(`${ORIGIN}/admin/orgs`, { headers: { Cookie: session } }),
      401,
      "unauthenticated",
    );
  });

  it("answers its data as JSON to the admin secret, and refuses everyone else", async () => {
    const res = await adminCall("/dashboard/data?day=2026-01-03");
    expect(res.status).toBe(200);
    const data = (await res.json()) as DashboardData;
    expect(data.usage.days).toHaveLength(14);
    expect(data.usage.days.at(-1)).toBe("2026-01-03");
    const { key } = await createAccount();
    await expectProblem(await call("/admin/dashboard/data"), 401, "unauthenticated");
    await expectProblem(await call("/admin/dashboard/data", { token: key.key }), 401, "unauthenticated");
    await expectProblem(
      await SELF.fetch(`${ORIGIN}/admin/dashboard/data`, { headers: { Cookie: `${SESSION_COOKIE}=1.abc` } }),
      401,
      "unauthenticated",
    );
    await expectProblem(await adminCall("/dashboard/data?day=yesterday"), 400, "invalid_request");
    const huge = await SELF.fetch(`${ORIGIN}/admin/dashboard/session`, {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: `secret=${"x".repeat(Number(env.MAX_BODY_BYTES) + 1)}`,
    });
    await expectProblem(huge, 413, "payload_too_large");
    await expectProblem(await adminCall("/dashboard?day=2026-01-03&x=1"), 400, "invalid_request");
  });

  it("escapes what an org calls itself, so no name can run in the page", async () => {
    const name = "</script><script>alert(1)</script>";
    const { org, user, key } = await createAccount();
    expect((await adminCall(`/orgs/${org.id}`, { method: "PATCH", body: { name } })).status).toBe(200);
    const today = new Date().toISOString().slice(0, 10);
    await env.DB.prepare(
      "INSERT INTO usage_daily (day, org_id, user_id, key_id, model, requests, prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, 'tab-test', 1, 10, 5)",
    )
      .bind(today, org.id, user.id, key.id)
      .run();
    const page = await (await adminCall("/dashboard")).text();
    // The name is in the page's data, with its `<` escaped, and nowhere as markup.
    expect(page).toContain("\\u003c/script>\\u003cscript>alert(1)\\u003c/script>");
    expect(page).not.toContain("<script>alert(1)");
  });

  it("names each usage row's key, and counts agent tasks on every day of the window", async () => {
    const { org, user, key } = await createAccount();
    const day = "2025-03-14";
    const usage = env.DB.prepare(
      "INSERT INTO usage_daily (day, org_id, user_id, key_id, model, requests, prompt_tokens, completion_tokens) VALUES (?, ?, ?, ?, 'tab-test', 1, 10, 5)",
    );
    const task = env.DB.prepare(
      "INSERT INTO agent_tasks (id, org_id, user_id, model, created_at) VALUES (?, ?, ?, 'm', ?)",
    );
    await env.DB.batch([
      usage.bind(day, org.id, user.id, key.id),
      // Usage outlives its key.
      usage.bind(day, org.id, user.id, "key_gone"),
      task.bind(`task_${crypto.randomUUID()}`, org.id, user.id, Date.parse(`${day}T23:59:59Z`)),
      task.bind(`task_${crypto.randomUUID()}`, org.id, user.id, Date.parse(`${day}T00:00:00Z`) - 1),
    ]);
    const data = (await (await adminCall(`/dashboard/data?day=${day}`)).json()) as DashboardData;
    const rows = data.usage.rows.filter((r) => r.orgId === org.id);
    const named = Object.fromEntries(rows.map((r) => [r.keyId, [r.keyName, r.keyPrefix]]));
    expect(named).toEqual({ [key.id]: [key.name, key.prefix], key_gone: [null, null] });
    expect(JSON.stringify(data)).not.toContain(key.key);
    // One day with a task is still fourteen days on the chart's axis, in order.
    expect(data.agents.createdByDay.map((d) => d.day)).toEqual(data.usage.days);
    expect(data.agents.createdByDay.slice(-2)).toEqual([
      { day: "2025-03-13", tasks: 1 },
      { day, tasks: 1 },
    ]);
    expect(data.agents.createdByDay.slice(0, -2).every((d) => d.tasks === 0)).toBe(true);
  });

  it("sessions expire, and a changed secret ends them", async () => {
    const now = Date.now();
    const token = await sessionToken("secret-one-0123456789abcdefghijklmnop", now);
    expect(await validSession("secret-one-0123456789abcdefghijklmnop", token, now)).toBe(true);
    expect(await validSession("secret-two-0123456789abcdefghijklmnop", token, now)).toBe(false);
    expect(await validSession("secret-one-0123456789abcdefghijklmnop", token, now + 13 * 3_600_000)).toBe(false);
    expect(await validSession("secret-one-0123456789abcdefghijklmnop", `${token}x`, now)).toBe(false);
  });

  it("takes percentiles as DuckDB's quantile_disc does", () => {
    const values = Array.from({ length: 20 }, (_, i) => i + 1);
    expect(quantileDisc(values, 0.5)).toBe(10);
    expect(quantileDisc(values, 0.95)).toBe(19);
    expect(quantileDisc([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95)).toBe(10);
    expect(quantileDisc([7], 0.95)).toBe(7);
    expect(quantileDisc([], 0.5)).toBeNull();
  });
  it("refuses a sign-in or sign-out sent from another site with a 403 problem+json, and takes its own", async () => {
    const crossSite: Record<string, string>[] = [
      { Origin: "https://evil.example" },
      { Origin: "null" },
      { Origin: "http://edge.test" },
      { "Sec-Fetch-Site": "cross-site" },
      { "Sec-Fetch-Site": "same-site" },
      { "Sec-Fetch-Site": "cross-site", Origin: ORIGIN },
    ];
    for (const headers of crossSite) {
      const inAttempt = await login(env.ADMIN_SECRET, { ...headers, "CF-Connecting-IP": "192.0.2.10" });
      const problem = await expectProblem(inAttempt, 403, "forbidden");
      expect(problem.detail, JSON.stringify(headers)).toContain("another site");
      expect(inAttempt.headers.get("Set-Cookie")).toBeNull();
      const out = await logout({ ...headers, Cookie: `${SESSION_COOKIE}=x` });
      await expectProblem(out, 403, "forbidden");
      expect(out.headers.get("Set-Cookie")).toBeNull();
    }
    // Refused before the secret is looked at: cross-site posts spend none of a network's sign-in attempts.
    for (let i = 0; i < 12; i++)
      await expectProblem(
        await login(WRONG, { Origin: "https://evil.example", "CF-Connecting-IP": "192.0.2.10" }),
        403,
        "forbidden",
      );
    const sameOrigin: Record<string, string>[] = [
      { Origin: ORIGIN },
      { "Sec-Fetch-Site": "same-origin" },
      { "Sec-Fetch-Site": "none" },
      {},
    ];
    for (const headers of sameOrigin) {
      const signedIn = await login(env.ADMIN_SECRET, { ...headers, "CF-Connecting-IP": "192.0.2.10" });
      expect(signedIn.status, JSON.stringify(headers)).toBe(303);
      expect(signedIn.headers.get("Set-Cookie")).toContain(`${SESSION_COOKIE}=`);
      const out = await logout({ ...headers, Cookie: signedIn.headers.get("Set-Cookie")!.split(";")[0]! });
      expect(out.status).toBe(303);
      expect(out.headers.get("Set-Cookie")).toMatch(new RegExp(`${SESSION_COOKIE}=;.*Max-Age=0`, "i"));
    }
  });

  it("answers a malformed sign-in with a problem document, never the HTML page", async () => {
    const net = { "CF-Connecting-IP": "192.0.2.20" };
    const form = "application/x-www-form-urlencoded";
    const cases: [body: string | Uint8Array, type: string | undefined, status: number, code: ErrorCode][] = [
      ["{not json", "application/json", 400, "invalid_request"],
      ["{}", "application/json", 400, "invalid_request"],
      [JSON.stringify({ secret: 42 }), "application/json", 400, "invalid_request"],
      [JSON.stringify({ secret: WRONG, remember: true }), "application/json", 400, "invalid_request"],
      [JSON.stringify({ secret: "x".repeat(2000) }), "application/json", 400, "invalid_request"],
      ["", form, 400, "invalid_request"],
      ["secret=", form, 400, "invalid_request"],
      ["name=admin", form, 400, "invalid_request"],
      [`secret=${WRONG}&secret=${WRONG}`, form, 400, "invalid_request"],
      [`secret=${"x".repeat(2000)}`, form, 400, "invalid_request"],
      [new Uint8Array([...new TextEncoder().encode("secret="), 0xff, 0xfe]), form, 400, "invalid_request"],
      [`secret=${WRONG}`, "text/plain", 415, "unsupported_media_type"],
      [`secret=${WRONG}`, undefined, 415, "unsupported_media_type"],
      [
        `--b\r\nContent-Disposition: form-data; name="secret"\r\n\r\nx\r\n--b--`,
        "multipart/form-data; boundary=b",
        415,
        "unsupported_media_type",
      ],
    ];
    for (const [body, type, status, code] of cases) {
      const response = await signIn(body, type, net);
      expect(response.headers.get("Content-Type"), `${type} ${String(body).slice(0, 40)}`).not.toMatch(/html/);
      await expectProblem(response, status, code);
    }
    // A well-formed JSON sign-in answers JSON too: a problem for a wrong secret, the cookie for the right one.
    await expectProblem(await signIn(JSON.stringify({ secret: WRONG }), "application/json", net), 403, "forbidden");
    const json = await signIn(JSON.stringify({ secret: env.ADMIN_SECRET }), "application/json", net);
    expect(json.status).toBe(204);
    expect(json.headers.get("Set-Cookie")).toMatch(/HttpOnly/i);
  });

  it("throttles failed sign-ins from one network with a 429 problem+json and Retry-After, the right secret included", async () => {
    const attacker = { "CF-Connecting-IP": "198.51.100.7" };
    for (let i = 0; i < 10; i++) expect((await login(WRONG, attacker)).status).toBe(403);
    for (const ip of ["198.51.100.7", "198.51.100.200"]) {
      for (const secret of [WRONG, env.ADMIN_SECRET]) {
        const refused = await login(secret, { "CF-Connecting-IP": ip });
        const retryAfter = Number(refused.headers.get("Retry-After"));
        const problem = await expectProblem(refused, 429, "rate_limited");
        expect(problem.limit).toBe("dashboard-login-network");
        expect(retryAfter).toBeGreaterThanOrEqual(1);
        expect(retryAfter).toBeLessThanOrEqual(15 * 60);
        expect(refused.headers.get("Set-Cookie")).toBeNull();
      }
    }
    // Another network signs in; right secrets give their attempt back, so any number of them pass.
    for (let i = 0; i < 12; i++)
      expect((await login(env.ADMIN_SECRET, { "CF-Connecting-IP": "203.0.113.9" })).status).toBe(303);
    expect((await login(WRONG, { "CF-Connecting-IP": "203.0.113.9" })).status).toBe(403);
  });

  // Last in this file: it spends the whole edge's sign-in attempts for the hour.
  it("throttles failed sign-ins to the edge as a whole, whatever network they claim", async () => {
    let failures = 0;
    let refused: Response | undefined;
    for (let i = 0; i < 120 && !refused; i++) {
      const response = await login(WRONG, { "CF-Connecting-IP": `10.${i}.0.1` });
      if (response.status === 429) refused = response;
      else {
        expect(response.status).toBe(403);
        failures++;
      }
    }
    expect(refused?.status).toBe(429);
    // Earlier tests in this file failed a few sign-ins of their own; the hour refills a couple more meanwhile.
    expect(failures).toBeLessThanOrEqual(100);
    expect(failures).toBeGreaterThan(60);
    expect((await expectProblem(refused!, 429, "rate_limited")).limit).toBe("dashboard-login-edge");
    const fresh = await login(env.ADMIN_SECRET, { "CF-Connecting-IP": "2001:db8:77::1" });
    expect(fresh.headers.get("Retry-After")).toMatch(/^\d+$/);
    expect((await expectProblem(fresh, 429, "rate_limited")).limit).toBe("dashboard-login-edge");
  });
});
