import { describe, expect, it, vi } from "vitest";
import { printThrottles } from "../../client/cli/commands/admin.js";
import { main } from "../../client/cli/main.js";
import { EXIT } from "../../client/cli/output.js";
import type { AbuseThrottle } from "../../protocol/schemas.js";
import { captureCli, stubEdge } from "../support/cli-capture.js";

const base: AbuseThrottle = {
  id: "abt_0123456789abcdefghij",
  kind: "prefix",
  subject: "203.0.113.0/24",
  orgId: null,
  signal: "active_free_accounts",
  observed: 41,
  threshold: 40,
  reason: "41 free accounts active in an hour (threshold 40)",
  createdAt: "2026-05-01T10:00:00.000Z",
  expiresAt: "2026-05-01T11:00:00.000Z",
  liftedAt: null,
  active: true,
};
const throttles: AbuseThrottle[] = [
  base,
  {
    ...base,
    id: "abt_lifted",
    kind: "account",
    subject: "usr_abc",
    orgId: "org_abc",
    signal: "key_creations",
    liftedAt: "2026-05-01T10:30:00.000Z",
    active: false,
  },
  { ...base, id: "abt_expired", subject: "2001:db8:1:2::/64", active: false },
];

const output = captureCli();

const admin = (...args: string[]) =>
  main(["--base-url", "http://edge.test", "--admin-secret", "s".repeat(40), ...args]);

describe("sextant admin abuse", () => {
  it("prints a table with the ratio, the dates, the state and the reason", () => {
    printThrottles(throttles);
    const lines = output().trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID\s+KIND\s+SUBJECT\s+SIGNAL\s+OBSERVED\s+CREATED\s+EXPIRES\s+STATE\s+REASON$/);
    expect(lines[1]).toMatch(
      /^abt_0123456789abcdefghij\s+prefix\s+203\.0\.113\.0\/24\s+active_free_accounts\s+41\/40\s+2026-05-01 10:00\s+2026-05-01 11:00\s+active\s+41 free accounts/,
    );
    expect(lines[2]).toMatch(/^abt_lifted\s+account\s+usr_abc\s+key_creations\s.*\slifted\s/);
    expect(lines[3]).toMatch(/^abt_expired\s+prefix\s+2001:db8:1:2::\/64\s.*\sexpired\s/);
    expect(lines[1]!.indexOf("active ")).toBe(lines[0]!.indexOf("STATE"));
  });

  it("says so when nothing is throttled", () => {
    printThrottles([]);
    expect(output()).toBe("(none)\n");
  });

  it("lists active throttles by default and all of them with --all", async () => {
    const requests = stubEdge({ data: throttles });
    expect(await admin("admin", "abuse", "list")).toBe(EXIT.ok);
    expect(await admin("admin", "abuse", "list", "--all")).toBe(EXIT.ok);
    expect(requests.map((r) => `${r.method} ${r.url.pathname}${r.url.search}`)).toEqual([
      "GET /admin/abuse",
      "GET /admin/abuse?all=true",
    ]);
    expect(output()).toContain("abt_expired");
  });

  it("lifts a throttle and prints the record with --json", async () => {
    const lifted = { ...base, liftedAt: "2026-05-01T10:40:00.000Z", active: false };
    const requests = stubEdge(lifted);
    expect(await admin("--json", "admin", "abuse", "lift", base.id)).toBe(EXIT.ok);
    expect(requests).toHaveLength(1);
    expect(requests[0]!.method).toBe("POST");
    expect(requests[0]!.url.pathname).toBe(`/admin/abuse/${base.id}/lift`);
    expect(JSON.parse(output())).toEqual(lifted);
  });

  it("exits 4 when the throttle does not exist", async () => {
    vi.stubGlobal(
      "fetch",
      async () =>
        new Response(
          JSON.stringify({
            type: "/errors/not_found",
            title: "Not found",
            status: 404,
            code: "not_found",
            detail: "No abuse throttle `abt_x`.",
          }),
          { status: 404, headers: { "Content-Type": "application/problem+json" } },
        ),
    );
    expect(await admin("admin", "abuse", "lift", "abt_x")).toBe(EXIT.notFound);
  });
});
