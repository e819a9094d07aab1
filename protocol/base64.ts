/** Base64 and base64url for bytes, in the Workers runtime, Node and browsers alike (no `Buffer`). */

export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  // In slices: spreading a large array into one call would overflow the argument stack.
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

export const fromBase64 = (text: string): Uint8Array<ArrayBuffer> =>
  Uint8Array.from(atob(text), (ch) => ch.charCodeAt(0));

/** Unpadded base64url (RFC 4648 §5). */
export const toBase64url = (bytes: Uint8Array): string =>
  toBase64(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");

export function fromBase64url(text: string): Uint8Array<ArrayBuffer> {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  return fromBase64(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
}
