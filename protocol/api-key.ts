/**
 * API key format, shared by the edge (which mints and verifies keys) and the client
 * (which rejects a mistyped key before it ever leaves the machine).
 *
 * `sxt_` + 40 base62 characters of randomness + 6 base62 characters of CRC-32 checksum.
 * The recognisable prefix lets secret scanners find leaked keys, and the checksum lets
 * the edge turn away garbage without a database lookup.
 */
import { bytesToHex } from "@noble/hashes/utils.js";

export const API_KEY_PREFIX = "sxt_";
const BODY_LENGTH = 40;
const CHECKSUM_LENGTH = 6;
/** Characters of a key kept in the clear to identify it in listings. */
export const DISPLAY_PREFIX_LENGTH = API_KEY_PREFIX.length + 8;
const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const KEY_PATTERN = new RegExp(`^${API_KEY_PREFIX}[0-9A-Za-z]{${BODY_LENGTH + CHECKSUM_LENGTH}}$`);

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC-32 of a key's base62 body: ASCII, so each character is its own byte. */
function crc32(ascii: string): number {
  let crc = 0xffffffff;
  for (let i = 0; i < ascii.length; i++) crc = CRC_TABLE[(crc ^ ascii.charCodeAt(i)) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

function base62Fixed(value: number, length: number): string {
  let out = "";
  for (let i = 0; i < length; i++) {
    out = ALPHABET[value % 62] + out;
    value = Math.floor(value / 62);
  }
  return out;
}

/** Mints a new key from the platform's CSPRNG. */
export function generateApiKey(): string {
  // Rejection sampling keeps every character uniformly distributed over the alphabet.
  let body = "";
  while (body.length < BODY_LENGTH) {
    for (const byte of crypto.getRandomValues(new Uint8Array(64))) {
      if (byte < 248 && body.length < BODY_LENGTH) body += ALPHABET[byte % 62];
    }
  }
  return API_KEY_PREFIX + body + base62Fixed(crc32(body), CHECKSUM_LENGTH);
}

/** True when `key` has the shape of a Sextant key and its checksum matches. */
export function isWellFormedApiKey(key: string): boolean {
  if (!KEY_PATTERN.test(key)) return false;
  const body = key.slice(API_KEY_PREFIX.length, API_KEY_PREFIX.length + BODY_LENGTH);
  return key.slice(-CHECKSUM_LENGTH) === base62Fixed(crc32(body), CHECKSUM_LENGTH);
}

export function displayPrefix(key: string): string {
  return key.slice(0, DISPLAY_PREFIX_LENGTH);
}

const utf8 = new TextEncoder();

/** Lower-case hex SHA-256: the only form of a key the edge ever stores. */
export async function hashApiKey(key: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", utf8.encode(key));
  return bytesToHex(new Uint8Array(digest));
}
