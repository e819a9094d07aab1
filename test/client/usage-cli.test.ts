import { describe, expect, it, vi } from "vitest";
import { main } from "../../client/cli/main.js";
import { parseDimensions, printUsage } from "../../client/cli/commands/usage.js";
import { UsageError } from "../../client/cli/context.js";
import { EXIT } from "../../client/cli/output.js";
import { generateApiKey } from "../../protocol/api-key.js";
import type { UsageReport } from "../../protocol/schemas.js";
import { captureCli, stubEdge } from "../support/cli-capture.js";

const report: UsageReport = {
  from: "2026-04-02",
  to: "2026-05-01",
  groupBy: ["day", "model"],
  rows: [
    {
      day: "2026-04-30",
      model: "sextant-large",
      requests: 3,
      promptTokens: 12_000,
      completionTokens: 800,
      totalTokens: 12_800,
    },
    { day: "2026-05-01", model: "sextant-fast", requests: 1200, promptTokens: 5, completionTokens: 7, totalTokens: 12 },
  ],
  totals: { requests: 1203, promptTokens: 12_005, completionTokens: 807, totalTokens: 12_812 },
};

const output = captureCli();

describe("sextant usage", () => {
  it("prints one column per dimension, the counts, and the totals last", () => {
    printUsage(report);
    const lines = output().trimEnd().split("\n");
    expect(lines[0]).toBe("Usage from 2026-04-02 to 2026-05-01 (UTC), by day, model");
    expect(lines[2]).toMatch(/^DAY\s+MODEL\s+REQUESTS\s+PROMPT\s+COMPLETION\s+TOTAL$/);
    expect(lines[3]).toMatch(/^2026-04-30\s+sextant-large\s+3\s+12,000\s+800\s+12,800$/);
    expect(lines[4]).toMatch(/^2026-05-01\s+sextant-fast\s+1,200\s+5\s+7\s+12$/);
    expect(lines.at(-1)).toBe("Total: 1,203 requests, 12,812 tokens (12,005 prompt, 807 completion)");
    // Columns line up: every value starts where its header does.
    expect(lines[3]!.indexOf("sextant-large")).toBe(lines[2]!.indexOf("MODEL"));
  });

  it("says so when there is no usage, and still prints zero totals", () => {
    printUsage({ ...report, rows: [], totals: { requests: 0, promptTokens: 0, completionTokens: 0, totalTokens: 0 } });
    expect(output()).toContain("(none)");
    expect(output().trimEnd().split("\n").at(-1)).toBe("Total: 0 requests, 0 tokens (0 prompt, 0 completion)");
  });

  it("parses --by and refuses unknown or empty dimensions", () => {
    expect(parseDimensions("key, user,key")).toEqual(["key", "user"]);
    expect(() => parseDimensions("day,org")).toThrow(UsageError);
    expect(() => parseDimensions(",")).toThrow(UsageError);
  });

  it("sends the flags as the query and prints JSON with --json", async () => {
    const requests = stubEdge(report);
    const argv = ["--base-url", "http://edge.test", "--api-key", generateApiKey(), "--json", "usage"];
    const code = await main([...argv, "--from", "2026-04-02", "--to", "2026-05-01", "--by", "model,day"]);
    expect(code).toBe(EXIT.ok);
    const url = requests[0]!.url;
    expect(url.pathname).toBe("/v1/usage");
    expect(Object.fromEntries(url.searchParams)).toEqual({
      from: "2026-04-02",
      to: "2026-05-01",
      groupBy: "model,day",
    });
    expect(JSON.parse(output())).toEqual(report);
  });

  it("exits 2 for a malformed day without calling the edge", async () => {
    const fetch = vi.fn();
    vi.stubGlobal("fetch", fetch);
    const code = await main([
      "--base-url",
      "http://edge.test",
      "--api-key",
      generateApiKey(),
      "usage",
      "--from",
      "May 1",
    ]);
    expect(code).toBe(EXIT.usage);
    expect(fetch).not.toHaveBeenCalled();
  });
});
