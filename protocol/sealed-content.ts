/**
 * Content an org chooses to keep with its editor events (the suggestion, the prompt), sealed on the
 * client with a key only the org holds: AES-256-GCM, a fresh 96-bit nonce per message, and the key's
 * id as associated data. The edge stores the ciphertext as it came and can never read it; the org's
 * data team opens it after export with the same key.
 */
import type { EditorEvent } from "./events.js";

type Sealed = NonNullable<Extract<EditorEvent, { type: "tab.shown" }>["content"]>;

const NONCE_BYTES = 12;

function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

const fromBase64 = (text: string) => Uint8Array.from(atob(text), (ch) => ch.charCodeAt(0));

/** A 32-byte AES-GCM key from its raw bytes (keep them where the org keeps secrets, never at the edge). */
export function contentKey(raw: Uint8Array<ArrayBuffer>): Promise<CryptoKey> {
  if (raw.byteLength !== 32) throw new RangeError("a content key is 32 bytes");
  return crypto.subtle.importKey("raw", raw, { name: "AES-GCM" }, false, ["encrypt", "decrypt"]);
}

/** `text` sealed with `key`, as an event's `content`. */
export async function sealContent(text: string, key: CryptoKey, keyId: string): Promise<Sealed> {
  const nonce = crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv: nonce, additionalData: new TextEncoder().encode(keyId) },
    key,
    new TextEncoder().encode(text),
  );
  const out = new Uint8Array(NONCE_BYTES + sealed.byteLength);
  out.set(nonce);
  out.set(new Uint8Array(sealed), NONCE_BYTES);
  return { key_id: keyId, ciphertext: toBase64(out) };
}

/** The text of a sealed `content` (the lake's `content` and `content_key_id` columns). */
export async function openContent(ciphertext: string, key: CryptoKey, keyId: string): Promise<string> {
  const bytes = fromBase64(ciphertext);
  const plain = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: bytes.subarray(0, NONCE_BYTES), additionalData: new TextEncoder().encode(keyId) },
    key,
    bytes.subarray(NONCE_BYTES),
  );
  return new TextDecoder().decode(plain);
}
