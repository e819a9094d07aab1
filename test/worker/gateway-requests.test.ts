/**
 * Tab's quick request check answers exactly what the schema does for every body it passes, and
 * leaves to the schema every body the schema would change or refuse.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CompletionRequest, quickCompletionRequest } from "../../workers/gateway/requests.js";

/** Values near each field's edges: right and wrong types, blanks, bounds. */
const edgy = fc.oneof(
  fc.constant(undefined),
  fc.constant(null),
  fc.boolean(),
  fc.integer({ min: -2, max: 3 }),
  fc.constantFrom(0.5, 1_000_000, 1_000_001, Number.NaN),
  fc.constantFrom("", " ", "m", " m", "m ", "x".repeat(256), "x".repeat(257)),
  fc.string(),
  fc.array(fc.oneof(fc.string(), fc.integer()), { maxLength: 2 }),
  fc.dictionary(fc.constantFrom("include_usage", "other"), fc.oneof(fc.boolean(), fc.string(), fc.constant(null))),
);

const body = fc.record(
  {
    model: edgy,
    prompt: edgy,
    suffix: edgy,
    stream: edgy,
    stream_options: edgy,
    max_tokens: edgy,
    n: edgy,
    temperature: edgy,
  },
  { requiredKeys: [] },
);

describe("tab's quick request check", () => {
  it("passes a body only when the schema takes it unchanged, and answers what the schema does", () => {
    fc.assert(
      fc.property(fc.oneof(body, fc.anything()), (value) => {
        const quick = quickCompletionRequest(value);
        if (quick === undefined) return;
        const parsed = CompletionRequest.safeParse(value);
        expect(parsed.success).toBe(true);
        expect(quick).toEqual(parsed.data);
      }),
      { numRuns: 5_000 },
    );
  });

  it("passes the bodies editors send", () => {
    for (const value of [
      { model: "tab", prompt: "def f(", suffix: ")", max_tokens: 16, stream: true },
      { model: "tab", prompt: ["def f("], stream: true, stream_options: { include_usage: true }, n: 1 },
      { model: "tab", prompt: "x", suffix: null, max_tokens: null, temperature: 0.2, stop: ["\n\n"] },
    ])
      expect(quickCompletionRequest(value)).toBe(value);
  });

  it("leaves to the schema what it would trim, refuse or reshape", () => {
    for (const value of [
      { model: " tab", prompt: "x" },
      { model: "", prompt: "x" },
      { model: "tab", prompt: ["a", "b"] },
      { model: "tab", prompt: "x", n: 2 },
      { model: "tab", prompt: "x", max_tokens: 0 },
      { model: "tab", prompt: "x", stream: "yes" },
      { model: "tab", prompt: "x", stream_options: { include_usage: "yes" } },
      { prompt: "x" },
      [],
      "body",
    ])
      expect(quickCompletionRequest(value)).toBeUndefined();
  });
});
