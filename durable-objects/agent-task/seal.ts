/**
 * Sealing what a task object stores: every payload that can hold code (the prompt, the model's
 * messages, tool arguments and results) is encrypted with AES-256-GCM under the task's data key,
 * which only the task's sandbox host holds. The object fetches the key into memory when it needs it
 * and never writes it down, so once the sandbox is destroyed its stored payloads cannot be read.
 */
import { openBytes, sealBytes } from "../../protocol/aead.js";
import { fromBase64url } from "../../protocol/base64.js";

export async function importDataKey(base64url: string): Promise<CryptoKey> {
  const raw = fromBase64url(base64url);
  if (raw.byteLength !== 32) throw new Error("The sandbox's data key is not 256 bits.");
  return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
}

/** `value` as JSON, sealed (`aead.ts`). */
export function seal(key: CryptoKey, value: unknown): Promise<Uint8Array> {
  return sealBytes(key, new TextEncoder().encode(JSON.stringify(value)));
}

export async function unseal<T>(key: CryptoKey, bytes: ArrayBuffer | Uint8Array): Promise<T> {
  const all = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  return JSON.parse(new TextDecoder().decode(await openBytes(key, all))) as T;
}
