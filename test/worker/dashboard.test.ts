import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { DashboardData } from "../../protocol/dashboard.js";
import { quantileDisc } from "../../workers/dashboard/data.js";
import { SESSION_COOKIE, sessionToken, validSession } from "../../workers/dashboard/session.js";
import { adminCall, call, createAccount, expectProblem, ORIGIN } from "./harness.js";

const login = (secret: string) =>
  SELF.fetch(`${ORIGIN}/admin/dashboard/session`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ secret }).toString(),
    redirect: "manual",
  });

describe("/admin/dashboard", () => {
  it("asks for the admin secret, signs in with a cookie, and serves the page with its data", async () => {
    const anonymous = await SELF.fetch(`${ORIGIN}/admin/dashboard`);
    expect(anonymous.status).toBe(200);
    const form = await anonymous.text();
    expect(form).toContain('name="secret"');
    expect(form).not.toContain("dashboard-data");

    const wrong = await login("not-the-admin-secret-at-all-0123456789");
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
});
