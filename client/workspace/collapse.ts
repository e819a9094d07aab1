/** A hit as collapsing sees it: what the index said it is, and the text read back from disk. */
export interface CollapsibleHit {
  path: string;
  startLine: number;
  endLine: number;
  chunkId: string;
  text: string;
}

/** Where else a collapsed hit's code is. */
export interface Copy {
  path: string;
  startLine: number;
  endLine: number;
}

/** Identifier sets this similar (Jaccard) are the same code: a build's cjs/ and esm/ copies differ in a few words. */
export const NEAR_IDENTICAL = 0.9;
/** Below this many distinct identifiers, overlap says too little: `}` and `return x;` are in every file. */
const MIN_IDENTIFIERS = 8;

const normalized = (text: string) => text.replace(/\s+/g, " ").trim();
const identifiers = (text: string) => new Set(text.match(/[A-Za-z_$][\w$]*/g) ?? []);

function jaccard(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  let both = 0;
  for (const word of a) if (b.has(word)) both++;
  return both / (a.size + b.size - both);
}

/**
 * Keeps the best-ranked hit of each group of copies and lists the others as its `copies`: hits with the
 * same chunk id (the same text, since the id is a keyed hash of it), the same text once whitespace is
 * collapsed, or identifier sets at least NEAR_IDENTICAL alike. An installed package holds the same code
 * in dist/, cjs/, esm/ and more, and one answer repeated three times pushes everything else off the page.
 * Hits whose text could not be read (empty) are never collapsed: there is nothing to compare.
 */
export function collapseCopies<H extends CollapsibleHit>(hits: readonly H[]): (H & { copies: Copy[] })[] {
  const kept: { hit: H & { copies: Copy[] }; text: string; words: Set<string> }[] = [];
  for (const hit of hits) {
    const text = normalized(hit.text);
    const words = identifiers(hit.text);
    const same =
      text === ""
        ? undefined
        : kept.find(
            (k) =>
              k.hit.chunkId === hit.chunkId ||
              k.text === text ||
              (words.size >= MIN_IDENTIFIERS &&
                k.words.size >= MIN_IDENTIFIERS &&
                jaccard(k.words, words) >= NEAR_IDENTICAL),
          );
    if (same) same.hit.copies.push({ path: hit.path, startLine: hit.startLine, endLine: hit.endLine });
    else kept.push({ hit: { ...hit, copies: [] }, text, words });
  }
  return kept.map((k) => k.hit);
}

/** `also in 3 files: a, b, c` naming at most `named` of them, for a hit with copies; "" without. */
export function copiesLine(copies: readonly Copy[], named = 3): string {
  const paths = [...new Set(copies.map((c) => c.path))];
  if (paths.length === 0) return "";
  const more = paths.length > named ? ", …" : "";
  return `also in ${paths.length} file${paths.length === 1 ? "" : "s"}: ${paths.slice(0, named).join(", ")}${more}`;
}
