import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Language, Parser, type Node } from "web-tree-sitter";
import { shippedAsset } from "../assets.js";
import { LANGUAGES, languageOf } from "./languages.js";

export interface Chunk {
  /** SHA-256 of the text, hex. */
  id: string;
  /** 1-based, inclusive. */
  startLine: number;
  endLine: number;
  text: string;
}

export interface ChunkOptions {
  /** Chunks are grown towards this size by merging small neighbours. */
  targetChars?: number;
  /** No chunk is larger (a single longer line is cut into pieces). */
  maxChars?: number;
  /** Line windows (for files without a grammar) overlap by this many lines. */
  overlapLines?: number;
}

const DEFAULTS = { targetChars: 1200, maxChars: 2400, overlapLines: 3 } as const;

/** The built package's own grammars (those of LANGUAGES alone), or tree-sitter-wasms' from the source. */
const shippedGrammars = shippedAsset("grammars/");
const grammarDir = shippedGrammars
  ? fileURLToPath(shippedGrammars)
  : join(dirname(createRequire(import.meta.url).resolve("tree-sitter-wasms/package.json")), "out");
let ready: Promise<void> | undefined;
const parsers = new Map<string, Promise<Parser>>();

/** The parser for a language with a grammar, loaded once per process. */
export function parserFor(language: keyof typeof LANGUAGES): Promise<Parser> {
  let parser = parsers.get(language);
  if (!parser) {
    ready ??= Parser.init();
    parser = ready.then(async () => {
      const p = new Parser();
      p.setLanguage(await Language.load(join(grammarDir, LANGUAGES[language]!.grammar)));
      return p;
    });
    parsers.set(language, parser);
  }
  return parser;
}

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/** A range of whole lines, 0-based and inclusive. */
interface Span {
  start: number;
  end: number;
}

/**
 * Splits a file into chunks that cover every line exactly once (line windows overlap slightly):
 * syntax-aware for the languages in LANGUAGES (a definition stays whole when it fits, a large one
 * is split at its members, small neighbours are merged, and the comments above a definition stay
 * with it), line windows for everything else.
 */
export async function chunkFile(path: string, text: string, options: ChunkOptions = {}): Promise<Chunk[]> {
  const opts = { ...DEFAULTS, ...options };
  if (text.length === 0) return [];
  // A final newline ends the last line; it does not start another one.
  const lines = text.split("\n");
  if (lines.length > 1 && text.endsWith("\n")) lines.pop();
  const language = languageOf(path);
  if (!language) return lineWindows(lines, opts);
  const parser = await parserFor(language);
  const tree = parser.parse(text);
  if (!tree) return lineWindows(lines, opts);
  try {
    const containers = new Set(LANGUAGES[language]!.containers);
    const spans: Span[] = [];
    // Prefix sums: a span's size in O(1), however often the walk asks.
    const upTo = new Float64Array(lines.length + 1);
    for (let i = 0; i < lines.length; i++) upTo[i + 1] = upTo[i]! + lines[i]!.length + 1;
    const size = (s: Span) => upTo[s.end + 1]! - upTo[s.start]!;
    const visit = (node: Node) => {
      // A comment is not a span of its own: its lines go to the definition below it.
      if (node.type.includes("comment")) return;
      const span = { start: node.startPosition.row, end: node.endPosition.row };
      const children = node.namedChildren.filter((c): c is Node => c !== null);
      if (
        size(span) <= opts.maxChars ||
        children.length === 0 ||
        (!containers.has(node.type) && node.type !== "program" && node !== tree.rootNode)
      ) {
        spans.push(span);
        return;
      }
      for (const child of children) visit(child);
    };
    for (const child of tree.rootNode.namedChildren) if (child) visit(child);
    return assemble(lines, spans, opts, size);
  } finally {
    tree.delete();
  }
}

/** Orders spans, gives every uncovered line to the span after it, merges small neighbours, bounds sizes. */
function assemble(lines: string[], spans: Span[], opts: Required<ChunkOptions>, size: (s: Span) => number): Chunk[] {
  const last = lines.length - 1;
  const sorted = spans.sort((a, b) => a.start - b.start || b.end - a.end);
  const covering: Span[] = [];
  let next = 0;
  for (const span of sorted) {
    if (span.end < next) continue; // nested in one already taken
    const start = next;
    covering.push({ start, end: Math.max(span.end, start) });
    next = Math.max(span.end, start) + 1;
  }
  if (next <= last) {
    if (covering.length > 0 && size({ start: next, end: last }) < opts.targetChars / 4)
      covering[covering.length - 1]!.end = last;
    else covering.push({ start: next, end: last });
  }
  const merged: Span[] = [];
  for (const span of covering) {
    const prev = merged[merged.length - 1];
    if (prev && size(prev) + size(span) <= opts.targetChars) prev.end = span.end;
    else merged.push({ ...span });
  }
  return merged.flatMap((span) =>
    size(span) <= opts.maxChars
      ? [toChunk(lines, span)]
      : lineWindows(lines.slice(span.start, span.end + 1), { ...opts, overlapLines: 0 }, span.start),
  );
}

function toChunk(lines: string[], span: Span, offset = 0): Chunk {
  const text = lines.slice(span.start, span.end + 1).join("\n");
  return { id: sha256(text), startLine: offset + span.start + 1, endLine: offset + span.end + 1, text };
}

/**
 * Windows of whole lines up to maxChars, each overlapping the previous by a few lines; a single
 * line longer than maxChars is cut into pieces. `offset` is the line number of `lines[0]` minus one.
 */
function lineWindows(lines: string[], opts: Required<ChunkOptions>, offset = 0): Chunk[] {
  const chunks: Chunk[] = [];
  let start = 0;
  while (start < lines.length) {
    const first = lines[start]!;
    if (first.length > opts.maxChars) {
      for (let at = 0; at < first.length; at += opts.maxChars) {
        const text = first.slice(at, at + opts.maxChars);
        chunks.push({ id: sha256(text), startLine: offset + start + 1, endLine: offset + start + 1, text });
      }
      start++;
      continue;
    }
    let end = start;
    let chars = first.length + 1;
    while (end + 1 < lines.length && chars + lines[end + 1]!.length + 1 <= opts.maxChars)
      chars += lines[++end]!.length + 1;
    chunks.push(toChunk(lines, { start, end }, offset));
    if (end + 1 >= lines.length) break;
    start = Math.max(start + 1, end + 1 - opts.overlapLines);
  }
  return chunks;
}
