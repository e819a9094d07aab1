/**
 * Sealing what a task object stores: every payload that can hold code (the prompt, the model's
 * messages, tool arguments and results) is encrypted with AES-256-GCM under the task's data key,
 * which only the task's sandbox host holds. The object fetches the key into memory when it needs it
 * and never writes it down, so once the sandbox is destroyed its stored payloads cannot be read.
 */
const IV_BYTES = 12;

export async function importDataKey(base64url: string): Promise<CryptoKey> {
  const raw = Uint8Array.from(atob(base64url.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
  if (raw.byteLength !== 32) throw new Error("The sandbox's data key is not 256 bits.");
  return crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]);
}

/** `value` as JSON, sealed: a fresh 96-bit IV followed by the ciphertext and tag. */
export async function seal(key: CryptoKey, value: unknown): Promise<Uint8Array> {
  const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
  const plain = new TextEncoder().encode(JSON.stringify(value));
  const sealed = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv }, key, plain));
  const out = new Uint8Array(IV_BYTES + sealed.byteLength);
  out.set(iv);
  out.set(sealed, IV_BYTES);
  return out;
}

export async function unseal<T>(key: CryptoKey, bytes: ArrayBuffer | Uint8Array): Promise<T> {
  const all = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
  const plain = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: all.subarray(0, IV_BYTES) },
    key,
    all.subarray(IV_BYTES),
  );
  return JSON.parse(new TextDecoder().decode(plain)) as T;
}
