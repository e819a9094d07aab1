import { Lazy } from "./lazy.js";
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";
import { TermKey } from "../../protocol/keyed-terms.js";

/** The most bytes a path segment may have: the most a Linux or macOS file name has. */
const MAX_SEGMENT_BYTES = 255;

/**
 * How long `encryptSegment(name)` is, without encrypting: a 16-byte tag and the name padded to the
 * next 16 bytes, in unpadded base64url. Infinity for a name that cannot be encrypted at all.
 */
export function encryptedSegmentLength(name: string): number {
  const bytes = Buffer.byteLength(name, "utf8");
  if (bytes === 0 || bytes > MAX_SEGMENT_BYTES) return Infinity;
  return Math.ceil(((16 + 16 * (Math.floor(bytes / 16) + 1)) * 4) / 3);
}

/**
 * Everything that keeps a workspace private is derived from one 32-byte secret that never leaves
 * the device (unless a user exports it to a teammate):
 * - path segments are encrypted deterministically and authenticated (a synthetic-IV construction:
 *   IV = HMAC-SHA-256(macKey, segment) truncated to 16 bytes, AES-256-CTR under encKey, the IV
 *   doubling as the tag), so the same name always encrypts the same and any tampering is caught;
 * - file hashes are HMAC-SHA-256 under contentKey, so the edge cannot match a stored hash against a
 *   known file.
 */
export class WorkspaceSecret {
  readonly #encKey: Buffer;
  readonly #macKey: Buffer;
  readonly #contentKey: Buffer;
  readonly #chunkKey: Buffer;
  /** The 32-byte key for the edge's vector transform, base64url: sent per request, never stored there. */
  readonly vectorKey: string;
  /** Keyed ids of the words in paths, for the edge's lexical channel; the path itself never leaves. */
  readonly pathTerms: TermKey;
  /** Identifies the secret (not secret itself): caches made under another secret are discarded. */
  readonly fingerprint: string;
  #encrypted = new Map<string, string>();
  #pending: Lazy<Map<string, string>> | undefined;
  readonly #decrypted = new Map<string, string>();

  constructor(readonly bytes: Buffer) {
    if (bytes.length !== 32) throw new Error("A workspace secret is 32 bytes.");
    const derive = (info: string) => Buffer.from(hkdfSync("sha256", bytes, Buffer.alloc(0), info, 32));
    this.#encKey = derive("sextant path-encryption v1");
    this.#macKey = derive("sextant path-siv v1");
    this.#contentKey = derive("sextant content-mac v1");
    this.#chunkKey = derive("sextant chunk-id v1");
    const vectorKey = derive("sextant vector key v1");
    this.vectorKey = vectorKey.toString("base64url");
    this.pathTerms = new TermKey(vectorKey);
    this.fingerprint = derive("sextant fingerprint v1").subarray(0, 12).toString("base64url");
  }

  /**
   * Seeds the encryption cache with pairs this secret produced earlier (the workspace state keeps
   * them). Only encryption uses it; decryption always authenticates.
   */
  seed(pairs: Lazy<Map<string, string>>): void {
    // Adopted, not copied, and only when a name is first encrypted: the state's map becomes the
    // cache and sees every new pair, and a scan that finds nothing changed never decodes it.
    this.#pending = pairs;
  }

  #adopt(): void {
    if (!this.#pending) return;
    const pairs = this.#pending.get();
    this.#pending = undefined;
    for (const [name, token] of this.#encrypted) pairs.set(name, token);
    this.#encrypted = pairs;
  }

  /** Every segment encrypted or decrypted so far, for the workspace state to keep. */
  segments(): Lazy<Map<string, string>> {
    if (this.#pending) return this.#pending;
    return Lazy.of(this.#encrypted);
  }

  static generate(): WorkspaceSecret {
    return new WorkspaceSecret(randomBytes(32));
  }

  /** The text form users export and import: `sxs_` and base64url. */
  toString(): string {
    return `sxs_${this.bytes.toString("base64url")}`;
  }

  static parse(text: string): WorkspaceSecret {
    const match = text.trim().match(/^sxs_([A-Za-z0-9_-]{43})$/);
    if (!match) throw new Error("Not a workspace secret: it looks like `sxs_` followed by 43 characters.");
    return new WorkspaceSecret(Buffer.from(match[1]!, "base64url"));
  }

  /** Encrypts one path segment. Padding to 16 bytes hides a name's exact length. */
  encryptSegment(name: string): string {
    this.#adopt();
    const cached = this.#encrypted.get(name);
    if (cached) return cached;
    const plain = Buffer.from(name, "utf8");
    if (plain.length === 0 || plain.length > MAX_SEGMENT_BYTES) throw new Error("A path segment is 1 to 255 bytes.");
    const padLength = 16 - (plain.length % 16);
    const padded = Buffer.concat([plain, Buffer.alloc(padLength, padLength)]);
    const iv = createHmac("sha256", this.#macKey).update(padded).digest().subarray(0, 16);
    const cipher = createCipheriv("aes-256-ctr", this.#encKey, iv);
    const token = Buffer.concat([iv, cipher.update(padded), cipher.final()]).toString("base64url");
    this.#encrypted.set(name, token);
    this.#decrypted.set(token, name);
    return token;
  }

  /** Decrypts and authenticates a segment; throws on anything this secret did not produce. */
  decryptSegment(token: string): string {
    const cached = this.#decrypted.get(token);
    if (cached !== undefined) return cached;
    // Seeded pairs were never decrypted here, and a seeded token is only trusted once authenticated.
    const raw = Buffer.from(token, "base64url");
    if (raw.length < 32 || raw.length % 16 !== 0 || raw.toString("base64url") !== token) {
      throw new Error("Not an encrypted path segment.");
    }
    const iv = raw.subarray(0, 16);
    const decipher = createDecipheriv("aes-256-ctr", this.#encKey, iv);
    const padded = Buffer.concat([decipher.update(raw.subarray(16)), decipher.final()]);
    const expected = createHmac("sha256", this.#macKey).update(padded).digest().subarray(0, 16);
    if (!timingSafeEqual(iv, expected)) throw new Error("An encrypted path segment failed authentication.");
    const padLength = padded[padded.length - 1]!;
    const name = padded.subarray(0, padded.length - padLength).toString("utf8");
    this.#decrypted.set(token, name);
    return name;
  }

  encryptPath(relative: string): string {
    return relative
      .split("/")
      .map((segment) => this.encryptSegment(segment))
      .join("/");
  }

  decryptPath(encrypted: string): string {
    return encrypted
      .split("/")
      .map((segment) => this.decryptSegment(segment))
      .join("/");
  }

  /** A keyed hash of file content, hex. */
  contentHash(content: Buffer): string {
    return createHmac("sha256", this.#contentKey).update(content).digest("hex");
  }

  /** A chunk's id: keyed, so a stored id cannot be matched against the hash of known code. */
  chunkId(text: string): string {
    return createHmac("sha256", this.#chunkKey).update(text).digest("hex");
  }

  contentHasher() {
    return createHmac("sha256", this.#contentKey);
  }
}
