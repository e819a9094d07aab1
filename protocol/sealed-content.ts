/**
 * Content an org chooses to keep with its editor events (the suggestion, the prompt), sealed on the
 * client with a key only the org holds (`aead.ts`, with the key's id as associated data). The edge
 * stores the ciphertext as it came and can never read it; the org's data team opens it after export
 * with the same key.
 */
import { openBytes, sealBytes } from "./aead.js";
import { fromBase64, toBase64 } from "./base64.js";
import type { EditorEvent } from "./events.js";

type Sealed = NonNullable<Extract<EditorEvent, { type: "tab.shown" }>["content"]>;

const encoder = new TextEncoder();

/** A 32-byte AES-GCM key from its raw bytes (keep them where the org keeps secrets, never at the edge). */
export function contentKey(raw: Uint8Array<ArrayBuffer>): Promise<CryptoKey> {
  if (raw.byteLength !== 32) throw new RangeError("a content key is 32 bytes");
  return crypto.subtle.importKey("raw", raw, { name: "AES-GCM" }, false, ["encrypt", "decrypt"]);
}

/** `text` sealed with `key`, as an event's `content`. */
export async function sealContent(text: string, key: CryptoKey, keyId: string): Promise<Sealed> {
  return { key_id: keyId, ciphertext: toBase64(await sealBytes(key, encoder.encode(text), encoder.encode(keyId))) };
}

/** The text of a sealed `content` (the lake's `content` and `content_key_id` columns). */
export async function openContent(ciphertext: string, key: CryptoKey, keyId: string): Promise<string> {
  return new TextDecoder().decode(await openBytes(key, fromBase64(ciphertext), encoder.encode(keyId)));
}
