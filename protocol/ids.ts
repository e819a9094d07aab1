const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";

/** A random, prefixed identifier such as `org_5k2n…`; 20 characters give about 103 bits. */
export function newId(prefix: "org" | "usr" | "key" | "ws" | "abt" | "task" | "tset" | "sess" | "eval"): string {
  let out = "";
  while (out.length < 20) {
    for (const byte of crypto.getRandomValues(new Uint8Array(32))) {
      if (byte < 252 && out.length < 20) out += ALPHABET[byte % 36];
    }
  }
  return `${prefix}_${out}`;
}
