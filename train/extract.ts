import { DOC_STYLES } from "../eval/doc-styles.js";
import { parse, stripComments } from "../eval/syntax.js";
import { languageOf } from "../client/index/languages.js";

/** The longest code side of a pair: about what one chunk of the index holds. */
export const MAX_CODE_CHARS = 2_000;

export interface Definition {
  /** The question the definition's doc gives, as the eval draws it; undefined when too short. */
  query: string | undefined;
  /** Its lines in the comment-free copy, blank lines dropped, cut to MAX_CODE_CHARS at a line. */
  code: string;
}

export interface ExtractedFile {
  language: string;
  definitions: Definition[];
  /** The whole file as the eval's indexed copy has it: every comment and docstring gone, lines kept. */
  stripped: string;
  /** The text of every comment and docstring, markers included. */
  comments: string[];
}

/** Lines `start..end` (1-based, inclusive) without blank ones, cut at a line boundary near `max` chars. */
export function definitionCode(lines: readonly string[], start: number, end: number, max = MAX_CODE_CHARS): string {
  let code = "";
  for (const line of lines.slice(start - 1, end)) {
    const kept = line.trimEnd();
    if (!kept.trim()) continue;
    if (code.length + kept.length + 1 > max) {
      if (!code) code = kept.slice(0, max);
      break;
    }
    code += (code ? "\n" : "") + kept;
  }
  return code;
}

/**
 * Reads a file the way the eval does (`eval/corpus.ts`): the language's doc style finds the
 * documented definitions and their questions, and the same removals give the comment-free copy the
 * code side is cut from, so a training pair looks exactly like an eval query and its answer.
 * Undefined for a file in a language without a doc style.
 */
export async function extractFile(path: string, text: string): Promise<ExtractedFile | undefined> {
  const language = languageOf(path);
  const style = language ? DOC_STYLES[language] : undefined;
  if (!language || !style) return undefined;
  const tree = await parse(path, text);
  if (!tree) return undefined;
  try {
    const removed = style.removed(tree);
    const stripped = stripComments(text, removed);
    const lines = stripped.split("\n");
    const definitions = style
      .documented(tree)
      .map(({ query, startLine, endLine }) => ({ query, code: definitionCode(lines, startLine, endLine) }));
    const comments = removed.map((r) => text.slice(r.startIndex, r.endIndex));
    return { language, definitions, stripped, comments };
  } finally {
    tree.delete();
  }
}
