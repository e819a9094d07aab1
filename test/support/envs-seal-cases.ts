/**
 * The seal's cases, run in workerd (test/worker/envs-seal.test.ts) and in Node
 * (test/client/envs-seal.test.ts): the edge seals in one, the client opens in the other, and both
 * must agree on the same WebCrypto X25519, HKDF and AES-GCM.
 */
import { expect, it } from "vitest";
import { toBase64url } from "../../protocol/base64.js";
import {
  generateOrgKeyPair,
  importPrivateKey,
  openJson,
  parsePublicKey,
  sealJson,
  type SealBinding,
} from "../../protocol/envs/seal.js";
import { openVerifierLog, sealVerifierLog, VERIFIER_LOG_BYTES } from "../../protocol/envs/verifier-log.js";

const binding: SealBinding = { orgId: "org_1", table: "rollout_steps", rowId: "ro_1.3", keyId: "k1" };
const value = { messages: [{ role: "user", content: "make the tests pass in src/secret.ts" }], n: 3 };

export function sealCases(): void {
  it("opens what it sealed with the org's private key, and each seal is fresh", async () => {
    const pair = await generateOrgKeyPair();
    const sealed = await sealJson(pair.publicKey, value, binding);
    expect(sealed).not.toContain("secret");
    expect(await sealJson(pair.publicKey, value, binding)).not.toBe(sealed);
    const key = await importPrivateKey(pair.privateJwk);
    expect(await openJson(key, sealed, binding)).toEqual(value);
  });

  it("refuses a tampered cell, another row's binding and another org's key", async () => {
    const pair = await generateOrgKeyPair();
    const key = await importPrivateKey(pair.privateJwk);
    const sealed = await sealJson(pair.publicKey, value, binding);
    const bytes = Uint8Array.from(
      atob(sealed.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (sealed.length % 4)) % 4)),
      (c) => c.charCodeAt(0),
    );
    for (const at of [1, 40, bytes.length - 1]) {
      const tampered = bytes.slice();
      tampered[at] = tampered[at]! ^ 1;
      await expect(openJson(key, toBase64url(tampered), binding)).rejects.toThrow();
    }
    for (const other of [
      { ...binding, rowId: "ro_1.4" },
      { ...binding, orgId: "org_2" },
      { ...binding, table: "rollouts" },
      { ...binding, keyId: "k2" },
    ])
      await expect(openJson(key, sealed, other)).rejects.toThrow();
    const wrong = await importPrivateKey((await generateOrgKeyPair()).privateJwk);
    await expect(openJson(wrong, sealed, binding)).rejects.toThrow();
  });

  it("seals a verifier log's last 64 KiB, which opens only as its own rollout's", async () => {
    const pair = await generateOrgKeyPair();
    const key = await importPrivateKey(pair.privateJwk);
    const orgKey = { keyId: "k1", publicKey: pair.publicKey };
    const short = "ok 1 - parses\nnot ok 2 - src/secret.ts rounds down\npassed 1 of 2\n";
    const sealed = await sealVerifierLog(orgKey, "org_1", "run_1-0", short);
    expect(sealed.content_key_id).toBe("k1");
    expect(sealed.content).not.toContain("secret");
    expect(await openVerifierLog(key, "org_1", "run_1-0", sealed)).toBe(short);
    await expect(openVerifierLog(key, "org_1", "run_1-1", sealed)).rejects.toThrow();
    await expect(openVerifierLog(key, "org_2", "run_1-0", sealed)).rejects.toThrow();
    // A long log (multi-byte characters included) keeps its end, says how much went, and stays in bounds.
    const long = `${"é test line\n".repeat(20_000)}passed 3 of 4\n`;
    const opened = await openVerifierLog(
      key,
      "org_1",
      "run_1-0",
      await sealVerifierLog(orgKey, "org_1", "run_1-0", long),
    );
    expect(new TextEncoder().encode(opened).byteLength).toBeLessThanOrEqual(VERIFIER_LOG_BYTES);
    expect(new TextEncoder().encode(opened).byteLength).toBeGreaterThan(VERIFIER_LOG_BYTES - 64);
    expect(opened).toMatch(/^\[… \d+ bytes omitted …\]\n/);
    expect(opened.endsWith("é test line\npassed 3 of 4\n")).toBe(true);
  });

  it("takes only a raw 32-byte X25519 public key as base64url", async () => {
    const pair = await generateOrgKeyPair();
    expect(parsePublicKey(toBase64url(pair.publicKey))).toEqual(pair.publicKey);
    expect(parsePublicKey(toBase64url(new Uint8Array(32)))).toBeNull();
    expect(parsePublicKey(toBase64url(new Uint8Array(31).fill(7)))).toBeNull();
    expect(parsePublicKey("not a key")).toBeNull();
  });
}
