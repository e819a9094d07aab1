import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  API_KEY_PREFIX,
  displayPrefix,
  generateApiKey,
  hashApiKey,
  isWellFormedApiKey,
} from "../../protocol/api-key.js";

const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

describe("API key format", () => {
  it("mints distinct, well-formed keys with the recognisable prefix", () => {
    const keys = new Set(Array.from({ length: 500 }, generateApiKey));
    expect(keys.size).toBe(500);
    for (const key of keys) {
      expect(key.startsWith(API_KEY_PREFIX)).toBe(true);
      expect(isWellFormedApiKey(key)).toBe(true);
    }
  });

  it("detects every single-character typo through the checksum", () => {
    fc.assert(
      fc.property(fc.nat({ max: 45 }), fc.constantFrom(...ALPHABET), (offset, replacement) => {
        const key = generateApiKey();
        const i = API_KEY_PREFIX.length + offset;
        fc.pre(key[i] !== replacement);
        const typo = key.slice(0, i) + replacement + key.slice(i + 1);
        return !isWellFormedApiKey(typo);
      }),
      { numRuns: 2000 },
    );
  });

  it("rejects anything that is not shaped like a key", () => {
    fc.assert(fc.property(fc.string(), (text) => !isWellFormedApiKey(text)));
    expect(isWellFormedApiKey(generateApiKey() + "x")).toBe(false);
  });

  it("hashes to lower-case hex SHA-256 and displays only a short prefix", async () => {
    const key = generateApiKey();
    expect(await hashApiKey(key)).toMatch(/^[0-9a-f]{64}$/);
    expect(await hashApiKey(key)).toBe(await hashApiKey(key));
    expect(displayPrefix(key)).toBe(key.slice(0, 12));
  });
});
