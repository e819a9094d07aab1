/**
 * Sealing a rollout's content to its org: the edge holds only the org's X25519 public key, so it can
 * seal what a rollout said and did but never open it again; the org opens the rows it exports with
 * the private key it keeps (`sextant envs keygen`).
 *
 * A sealed value is ECIES over WebCrypto, which workerd and Node both have: a fresh X25519 key pair
 * per value, its shared secret with the org's key through HKDF-SHA-256 (salt: both public keys) to an
 * AES-256-GCM key, and the ciphertext bound to the row it belongs in by associated data (org, table,
 * row id, key id), so a sealed cell copied to another row, table or org does not open.
 *
 *   base64url( 0x01 | ephemeral public key (32) | nonce (12) | ciphertext | tag (16) )
 */
import { openBytes, sealBytes } from "../aead.js";
import { fromBase64url, toBase64url } from "../base64.js";

const VERSION = 1;
const PUBLIC_BYTES = 32;
const INFO = new TextEncoder().encode("sextant envs seal v1");
const X25519 = { name: "X25519" } as const;

// Bytes here are never a SharedArrayBuffer's, which is all the runtime's typings guard against.
const own = (bytes: Uint8Array) => bytes as Uint8Array<ArrayBuffer>;
// workerd's typings name the peer key `$public`; the runtime, like Node and the spec, reads `public`.
const withPeer = (peer: CryptoKey) =>
  ({ name: "X25519", public: peer }) as unknown as Parameters<typeof crypto.subtle.deriveBits>[0];

/** What a sealed cell is bound to: opening it under any other row's binding fails. */
export interface SealBinding {
  orgId: string;
  table: string;
  rowId: string;
  keyId: string;
}

const encoder = new TextEncoder();

export function bindingBytes(b: SealBinding): Uint8Array {
  return encoder.encode(["sextant-envs-seal-v1", b.orgId, b.table, b.rowId, b.keyId].join("\0"));
}

/** A raw X25519 public key (32 bytes, as base64url): what `PUT /v1/envs/keys` takes. */
export function parsePublicKey(base64url: string): Uint8Array<ArrayBuffer> | null {
  if (!/^[A-Za-z0-9_-]{43}$/.test(base64url)) return null;
  const raw = fromBase64url(base64url);
  // All-zero (and other small-order points) would make every shared secret zero: refused.
  if (raw.byteLength !== PUBLIC_BYTES || raw.every((b) => b === 0)) return null;
  return raw;
}

async function aesKey(shared: ArrayBuffer, ephemeral: Uint8Array, recipient: Uint8Array): Promise<CryptoKey> {
  const salt = new Uint8Array(PUBLIC_BYTES * 2);
  salt.set(ephemeral);
  salt.set(recipient, PUBLIC_BYTES);
  const ikm = await crypto.subtle.importKey("raw", shared, "HKDF", false, ["deriveKey"]);
  return crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt, info: INFO },
    ikm,
    { name: "AES-GCM", length: 256 },
    false,
    ["encrypt", "decrypt"],
  );
}

/** `plain` sealed to the org's raw public key, bound to `binding`. */
export async function sealTo(publicKey: Uint8Array, plain: Uint8Array, binding: SealBinding): Promise<string> {
  const recipient = await crypto.subtle.importKey("raw", own(publicKey), X25519, false, []);
  const pair = (await crypto.subtle.generateKey(X25519, true, ["deriveBits"])) as CryptoKeyPair;
  const ephemeral = new Uint8Array((await crypto.subtle.exportKey("raw", pair.publicKey)) as ArrayBuffer);
  const shared = await crypto.subtle.deriveBits(withPeer(recipient), pair.privateKey, 256);
  const sealed = await sealBytes(await aesKey(shared, ephemeral, publicKey), plain, bindingBytes(binding));
  const out = new Uint8Array(1 + PUBLIC_BYTES + sealed.byteLength);
  out[0] = VERSION;
  out.set(ephemeral, 1);
  out.set(sealed, 1 + PUBLIC_BYTES);
  return toBase64url(out);
}

/** `value` as JSON, sealed (`sealTo`). */
export const sealJson = (publicKey: Uint8Array, value: unknown, binding: SealBinding) =>
  sealTo(publicKey, encoder.encode(JSON.stringify(value)), binding);

/** An org's key pair as the client keeps it: the private key as a JWK, its public half as raw bytes. */
export interface OrgKeyPair {
  privateJwk: JsonWebKey;
  publicKey: Uint8Array;
}

export async function generateOrgKeyPair(): Promise<OrgKeyPair> {
  const pair = (await crypto.subtle.generateKey(X25519, true, ["deriveBits"])) as CryptoKeyPair;
  return {
    privateJwk: (await crypto.subtle.exportKey("jwk", pair.privateKey)) as JsonWebKey,
    publicKey: new Uint8Array((await crypto.subtle.exportKey("raw", pair.publicKey)) as ArrayBuffer),
  };
}

/** The private key of a key file (`OrgKeyPair.privateJwk`), and its public half. */
export async function importPrivateKey(jwk: JsonWebKey): Promise<{ key: CryptoKey; publicKey: Uint8Array }> {
  if (jwk.kty !== "OKP" || jwk.crv !== "X25519" || typeof jwk.d !== "string" || typeof jwk.x !== "string")
    throw new Error("not an X25519 private key (a JWK with kty OKP, crv X25519, d and x)");
  const { key_ops: _ops, ...rest } = jwk;
  const key = await crypto.subtle.importKey("jwk", { ...rest, key_ops: ["deriveBits"] }, X25519, false, ["deriveBits"]);
  return { key, publicKey: fromBase64url(jwk.x) };
}

/** The plaintext of a sealed cell; rejects if it was sealed to another key, altered, or bound elsewhere. */
export async function openSealed(
  privateKey: { key: CryptoKey; publicKey: Uint8Array },
  sealed: string,
  binding: SealBinding,
): Promise<Uint8Array> {
  const bytes = fromBase64url(sealed);
  if (bytes.byteLength < 1 + PUBLIC_BYTES + 12 + 16 || bytes[0] !== VERSION)
    throw new Error("not a sealed value of this version");
  const ephemeral = bytes.subarray(1, 1 + PUBLIC_BYTES);
  const peer = await crypto.subtle.importKey("raw", own(ephemeral), X25519, false, []);
  const shared = await crypto.subtle.deriveBits(withPeer(peer), privateKey.key, 256);
  const key = await aesKey(shared, ephemeral, privateKey.publicKey);
  return openBytes(key, bytes.subarray(1 + PUBLIC_BYTES), bindingBytes(binding));
}

export async function openJson<T>(
  privateKey: { key: CryptoKey; publicKey: Uint8Array },
  sealed: string,
  binding: SealBinding,
): Promise<T> {
  return JSON.parse(new TextDecoder().decode(await openSealed(privateKey, sealed, binding))) as T;
}
