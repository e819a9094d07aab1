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

  it("takes only a raw 32-byte X25519 public key as base64url", async () => {
    const pair = await generateOrgKeyPair();
    expect(parsePublicKey(toBase64url(pair.publicKey))).toEqual(pair.publicKey);
    expect(parsePublicKey(toBase64url(new Uint8Array(32)))).toBeNull();
    expect(parsePublicKey(toBase64url(new Uint8Array(31).fill(7)))).toBeNull();
    expect(parsePublicKey("not a key")).toBeNull();
  });
}
