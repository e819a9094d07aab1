import { describe, expect, it } from "vitest";
import { RateLimitError } from "../../client/sdk/errors.js";
import { retryDelay } from "../../client/sdk/http.js";
import { parseRateLimit } from "../../client/sdk/rate-limit.js";

describe("the SDK and the RateLimit header fields", () => {
  it("parses the RateLimit field", () => {
    expect(parseRateLimit(new Headers({ RateLimit: '"tab-key";r=12;t=30' }))).toEqual({
      policy: "tab-key",
      remaining: 12,
      resetSeconds: 30,
    });
    expect(parseRateLimit(new Headers({ RateLimit: "garbage" }))).toBeUndefined();
    expect(parseRateLimit(new Headers())).toBeUndefined();
  });

  it("waits for Retry-After first, then for an exhausted limit's reset, then backs off", () => {
    expect(retryDelay(new Headers({ "Retry-After": "3", RateLimit: '"x";r=0;t=9' }), 0)).toBe(3000);
    expect(retryDelay(new Headers({ RateLimit: '"x";r=0;t=9' }), 0)).toBe(9000);
    const backoff = retryDelay(new Headers({ RateLimit: '"x";r=4;t=9' }), 0);
    expect(backoff).toBeLessThanOrEqual(500);
  });

  it("tells a rate-limited caller which limit it hit and how long to wait", () => {
    const headers = new Headers({ "Retry-After": "7", RateLimit: '"chat-key";r=0;t=7' });
    const err = RateLimitError.from(429, undefined, headers, "HTTP 429") as RateLimitError;
    expect(err).toBeInstanceOf(RateLimitError);
    expect(err.retryAfterSeconds).toBe(7);
    expect(err.rateLimit).toEqual({ policy: "chat-key", remaining: 0, resetSeconds: 7 });
  });
});
