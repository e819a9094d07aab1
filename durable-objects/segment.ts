/**
 * The R2 index's segment format: entries quantized to int8 with one scale per vector, with their
 * language code and keyed terms, laid out in one immutable binary object.
 */
import { LANGUAGE_CODES } from "../protocol/sync.js";
import type { HotEntry } from "./hot-slots.js";
import type { BackendEntry } from "./index-backend.js";

const MAGIC = 0x53585633; // "SXV3": entries with definition pieces
/** Segments written before pieces: read as entries without them. */
const MAGIC_V2 = 0x53585632; // "SXV2"

/** An entry as a segment stores it (and as the hot index holds it). */
export type RawEntry = HotEntry;

/** A language's code in segments and filters; 0 for a language not listed. */
export function languageCode(language: string): number {
  const code = (LANGUAGE_CODES as readonly string[]).indexOf(language);
  return code < 0 ? 0 : code;
}

/** int8 with one scale per vector: the largest magnitude maps to 127. */
export function quantizeVector(vector: Float32Array, dims: number): { scale: number; int8: Int8Array } {
  if (vector.length !== dims) throw new Error(`Expected ${dims} dimensions, got ${vector.length}.`);
  let max = 0;
  for (const x of vector) max = Math.max(max, Math.abs(x));
  const scale = max > 0 ? max / 127 : 1;
  const int8 = new Int8Array(dims);
  for (let j = 0; j < dims; j++) int8[j] = Math.round(vector[j]! / scale);
  return { scale, int8 };
}

export function quantize(entry: BackendEntry, dims: number): RawEntry {
  const { scale, int8 } = quantizeVector(entry.vector, dims);
  if ((entry.pieces?.length ?? 0) > 255) throw new Error("An entry holds at most 255 pieces.");
  return {
    id: Number(entry.id),
    language: languageCode(entry.language),
    scale,
    int8,
    termIds: entry.terms.ids,
    termCounts: entry.terms.counts,
    ...(entry.pieces?.length ? { pieces: entry.pieces.map((p) => quantizeVector(p, dims)) } : {}),
  };
}

/**
 * Header (magic, count, dims), then per entry: id (float64), language (u8), term count (u16),
 * piece count (u8), scale (float32), dims int8 values, each piece's scale (float32) and dims int8
 * values, the term ids (u32 each) and their counts (u16 each). Format 2 ("SXV2") had no pieces and
 * no piece count; it is still read.
 */
export function encodeSegment(entries: readonly RawEntry[], dims: number): Uint8Array {
  let size = 12;
  for (const e of entries)
    size += 8 + 1 + 2 + 1 + 4 + dims + (e.pieces?.length ?? 0) * (4 + dims) + e.termIds.length * 6;
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, MAGIC);
  view.setUint32(4, entries.length);
  view.setUint32(8, dims);
  let at = 12;
  const int8At = (int8: Int8Array) => {
    if (int8.length !== dims) throw new Error(`Expected ${dims} dimensions, got ${int8.length}.`);
    bytes.set(new Uint8Array(int8.buffer, int8.byteOffset, dims), at);
    at += dims;
  };
  for (const e of entries) {
    const pieces = e.pieces ?? [];
    view.setFloat64(at, e.id, true);
    view.setUint8(at + 8, e.language);
    view.setUint16(at + 9, e.termIds.length, true);
    view.setUint8(at + 11, pieces.length);
    view.setFloat32(at + 12, e.scale, true);
    at += 16;
    int8At(e.int8);
    for (const piece of pieces) {
      view.setFloat32(at, piece.scale, true);
      at += 4;
      int8At(piece.int8);
    }
    for (let t = 0; t < e.termIds.length; t++) view.setUint32(at + t * 4, e.termIds[t]!, true);
    at += e.termIds.length * 4;
    for (let t = 0; t < e.termIds.length; t++) view.setUint16(at + t * 2, e.termCounts[t]!, true);
    at += e.termIds.length * 2;
  }
  return bytes;
}

export function decodeSegment(bytes: Uint8Array, dims: number): RawEntry[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const magic = view.getUint32(0);
  if ((magic !== MAGIC && magic !== MAGIC_V2) || view.getUint32(8) !== dims)
    throw new Error("Not an index segment of this shape.");
  const withPieces = magic === MAGIC;
  const count = view.getUint32(4);
  const out: RawEntry[] = [];
  let at = 12;
  for (let i = 0; i < count; i++) {
    const id = view.getFloat64(at, true);
    const language = view.getUint8(at + 8);
    const terms = view.getUint16(at + 9, true);
    const pieceCount = withPieces ? view.getUint8(at + 11) : 0;
    const scale = view.getFloat32(at + (withPieces ? 12 : 11), true);
    at += withPieces ? 16 : 15;
    const int8 = new Int8Array(bytes.buffer, bytes.byteOffset + at, dims);
    at += dims;
    const pieces: { scale: number; int8: Int8Array }[] = [];
    for (let p = 0; p < pieceCount; p++) {
      const pieceScale = view.getFloat32(at, true);
      pieces.push({ scale: pieceScale, int8: new Int8Array(bytes.buffer, bytes.byteOffset + at + 4, dims) });
      at += 4 + dims;
    }
    const termIds = new Uint32Array(terms);
    for (let t = 0; t < terms; t++) termIds[t] = view.getUint32(at + t * 4, true);
    at += terms * 4;
    const termCounts = new Uint16Array(terms);
    for (let t = 0; t < terms; t++) termCounts[t] = view.getUint16(at + t * 2, true);
    at += terms * 2;
    out.push({ id, language, scale, int8, termIds, termCounts, ...(pieces.length > 0 ? { pieces } : {}) });
  }
  return out;
}
