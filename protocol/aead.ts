/**
 * AES-256-GCM as Sextant seals bytes, on the edge and on clients alike: a fresh 96-bit nonce per
 * message, stored before the ciphertext and its tag, and optional associated data bound to it.
 */
const NONCE_BYTES = 12;

// Bytes here are never a SharedArrayBuffer's, which is all the runtime's typings guard against.
const own = (bytes: Uint8Array) => bytes as Uint8Array<ArrayBuffer>;

export async function sealBytes(key: CryptoKey, plain: Uint8Array, aad?: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  const nonce = crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv: nonce, ...(aad ? { additionalData: own(aad) } : {}) },
    key,
    own(plain),
  );
  const out = new Uint8Array(NONCE_BYTES + sealed.byteLength);
  out.set(nonce);
  out.set(new Uint8Array(sealed), NONCE_BYTES);
  return out;
}

/** The plaintext of `sealed`; rejects if it was not sealed by `key` (with the same `aad`). */
export async function openBytes(
  key: CryptoKey,
  sealed: Uint8Array,
  aad?: Uint8Array,
): Promise<Uint8Array<ArrayBuffer>> {
  const plain = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: own(sealed.subarray(0, NONCE_BYTES)), ...(aad ? { additionalData: own(aad) } : {}) },
    key,
    own(sealed.subarray(NONCE_BYTES)),
  );
  return new Uint8Array(plain);
}
