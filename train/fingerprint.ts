import { createHash } from "node:crypto";
import { plainText } from "../eval/doc-text.js";
import type { ExtractedFile } from "./extract.js";

/** Bumped whenever what is digested changes, so that cached held-out digests are computed again. */
export const FINGERPRINT_FORMAT = 2;

/** A short digest: only ever compared, never reversed, so the held-out text itself is never kept. */
const digest = (text: string) => createHash("sha1").update(text).digest("base64").slice(0, 16);

/** Lower-cased words only: punctuation, markup and spacing hide nothing. */
export const normalizeWords = (text: string) =>
  text
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, " ")
    .trim();

/** Code with its spacing collapsed: reformatting alone does not make a copy new. */
const normalizeCode = (text: string) => text.replace(/\s+/g, " ").trim();

export const queryKey = (query: string) => digest(normalizeWords(query));
export const codeKey = (code: string) => digest(normalizeCode(code));
export const pairKey = (query: string, code: string) => digest(`${normalizeWords(query)}\0${normalizeCode(code)}`);

/** Sentences this long are a library's own words; shorter ones ("Returns the value.") are everyone's. */
const MIN_SENTENCE_WORDS = 8;
/**
 * License and copyright headers are shared by whole ecosystems (every Go file by the Go authors, every
 * Rust crate under "MIT or Apache-2.0"), and so are work notes: neither is a library's own words.
 */
const BOILERPLATE =
  /licen[cs]e|copyright|warrant|all rights reserved|spdx|permission is hereby|distribut|may not be copied|governed by|\b(todo|fixme)\b/i;
const sentences = new Intl.Segmenter("en", { granularity: "sentence" });

/** A comment's or docstring's words, without the markers around them. */
function commentWords(comment: string): string {
  return comment
    .replace(/^[rRuUbBfF]*("""|'''|"|')|("""|'''|"|')$/g, "")
    .replace(/^\s*(\/\*+!?|\*+\/|\*|\/\/[/!]?|#+)/gm, "")
    .replace(/\*+\/\s*$/, "");
}

/** Digests of the long, non-boilerplate sentences in a file's comments and docstrings. */
export function docSentences(comments: readonly string[]): string[] {
  const found: string[] = [];
  for (const comment of comments) {
    if (comment.length < 40) continue;
    const text = plainText(commentWords(comment));
    for (const { segment } of sentences.segment(text)) {
      const words = normalizeWords(segment);
      if (words.split(" ").length < MIN_SENTENCE_WORDS || BOILERPLATE.test(segment)) continue;
      found.push(digest(words));
    }
  }
  return found;
}

/** Lines that say something: `}` or `return x;` are in every codebase. */
const isTrivialLine = (line: string) => line.length < 16 || (line.match(/[A-Za-z_]\w*/g)?.length ?? 0) < 3;
/** Consecutive non-trivial lines hashed together: one common line is chance, several in a row a copy. */
export const SHINGLE_LINES = 4;

/** Digests of every run of SHINGLE_LINES non-trivial lines of comment-free code. */
export function codeShingles(stripped: string): string[] {
  const lines = stripped
    .split("\n")
    .map(normalizeCode)
    .filter((line) => !isTrivialLine(line));
  const found: string[] = [];
  for (let i = 0; i + SHINGLE_LINES <= lines.length; i++)
    found.push(digest(lines.slice(i, i + SHINGLE_LINES).join("\n")));
  return found;
}

/** What is known of the held-out code: digests only. */
export interface Fingerprints {
  sentences: Set<string>;
  shingles: Set<string>;
  queries: Set<string>;
  codes: Set<string>;
}

export const emptyFingerprints = (): Fingerprints => ({
  sentences: new Set(),
  shingles: new Set(),
  queries: new Set(),
  codes: new Set(),
});

/** Adds one held-out file's digests. */
export function addFingerprints(into: Fingerprints, file: ExtractedFile): void {
  for (const d of docSentences(file.comments)) into.sentences.add(d);
  for (const d of codeShingles(file.stripped)) into.shingles.add(d);
  for (const { query, code } of file.definitions) {
    if (query) into.queries.add(queryKey(query));
    if (code) into.codes.add(codeKey(code));
  }
}

/** A file is a copy when this many of its shingles are held out, or this share of them (and at least 3). */
const COPIED_SHINGLES = 10;
const COPIED_SHARE = 0.25;

/** Why a file must not be trained on, or undefined when it shares nothing substantial with held-out code. */
export function contamination(file: ExtractedFile, held: Fingerprints): string | undefined {
  if (docSentences(file.comments).some((d) => held.sentences.has(d))) return "held-out doc sentence";
  const shingles = codeShingles(file.stripped);
  const copied = shingles.filter((d) => held.shingles.has(d)).length;
  if (copied >= COPIED_SHINGLES || (copied >= 3 && copied >= COPIED_SHARE * shingles.length))
    return `${copied} of ${shingles.length} code shingles held out`;
  return undefined;
}

/** The digests as plain arrays (sorted, so a cached copy is byte-identical), and back. */
export const serializeFingerprints = (f: Fingerprints) =>
  Object.fromEntries(Object.entries(f).map(([k, v]) => [k, [...(v as Set<string>)].sort()])) as Record<
    keyof Fingerprints,
    string[]
  >;

export const deserializeFingerprints = (f: Record<keyof Fingerprints, string[]>): Fingerprints => ({
  sentences: new Set(f.sentences),
  shingles: new Set(f.shingles),
  queries: new Set(f.queries),
  codes: new Set(f.codes),
});
