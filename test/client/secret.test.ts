import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SEGMENT } from "../../protocol/sync.js";
import { encryptedSegmentLength, WorkspaceSecret } from "../../client/workspace/secret.js";

// Any file name a file system can hold: 1 to 255 bytes of UTF-8 without "/" or NUL.
const segment = fc
  .string({ unit: "grapheme", minLength: 1, maxLength: 60 })
  .filter((s) => !s.includes("/") && !s.includes("\0") && Buffer.byteLength(s) <= 255);

describe("path encryption", () => {
  it("round-trips every segment and produces tokens the edge accepts", () => {
    const secret = WorkspaceSecret.generate();
    fc.assert(
      fc.property(segment, (name) => {
        const token = secret.encryptSegment(name);
        expect(SEGMENT.test(token)).toBe(true);
        expect(encryptedSegmentLength(name)).toBe(token.length);
        expect(new WorkspaceSecret(secret.bytes).decryptSegment(token)).toBe(name);
      }),
      { numRuns: 500 },
    );
  });

  it("is deterministic under one secret and unlinkable across secrets", () => {
    const a = WorkspaceSecret.generate();
    const b = WorkspaceSecret.generate();
    expect(new WorkspaceSecret(a.bytes).encryptSegment("index.ts")).toBe(a.encryptSegment("index.ts"));
    expect(a.encryptSegment("index.ts")).not.toBe(b.encryptSegment("index.ts"));
    expect(a.encryptPath("src/index.ts").split("/")).toHaveLength(2);
    expect(a.decryptPath(a.encryptPath("src/lib/index.ts"))).toBe("src/lib/index.ts");
  });

  it("hides a name's exact length inside 16-byte buckets", () => {
    const secret = WorkspaceSecret.generate();
    expect(secret.encryptSegment("a").length).toBe(secret.encryptSegment("fifteen-chars-x").length);
    expect(secret.encryptSegment("sixteen-chars-xx").length).toBeGreaterThan(secret.encryptSegment("a").length);
  });

  it("rejects every tampered token and every token made under another secret", () => {
    const secret = WorkspaceSecret.generate();
    const other = WorkspaceSecret.generate();
    fc.assert(
      fc.property(segment, fc.nat(), fc.integer({ min: 1, max: 255 }), (name, at, flip) => {
        const raw = Buffer.from(secret.encryptSegment(name), "base64url");
        raw[at % raw.length]! ^= flip;
        const fresh = new WorkspaceSecret(secret.bytes);
        expect(() => fresh.decryptSegment(raw.toString("base64url"))).toThrow();
      }),
      { numRuns: 300 },
    );
    expect(() => new WorkspaceSecret(other.bytes).decryptSegment(secret.encryptSegment("x"))).toThrow(/authentication/);
    expect(() => secret.decryptSegment("not-a-token")).toThrow();
  });

  it("keys file hashes, so a hash reveals nothing without the secret", () => {
    const a = WorkspaceSecret.generate();
    const b = WorkspaceSecret.generate();
    const content = Buffer.from("export const x = 1;\n");
    expect(a.contentHash(content)).toMatch(/^[0-9a-f]{64}$/);
    expect(a.contentHash(content)).not.toBe(b.contentHash(content));
    expect(a.contentHash(content)).not.toBe(createHash("sha256").update(content).digest("hex"));
  });

  it("exports and parses the secret, and refuses anything else", () => {
    const secret = WorkspaceSecret.generate();
    expect(WorkspaceSecret.parse(secret.toString()).fingerprint).toBe(secret.fingerprint);
    expect(() => WorkspaceSecret.parse("sxs_short")).toThrow();
  });
});
