/**
 * Whether bytes are a binary file's, as git decides it: a NUL in the first 8,000 bytes. One rule for
 * the client (what it indexes and uploads as text) and the sandbox host (what it greps and diffs).
 */
export const BINARY_SNIFF_BYTES = 8000;

export function looksBinary(bytes: Uint8Array): boolean {
  return bytes.subarray(0, BINARY_SNIFF_BYTES).includes(0);
}
