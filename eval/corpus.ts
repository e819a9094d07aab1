import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { languageOf } from "../client/index/languages.js";
import { DOC_STYLES, type DocStyle } from "./doc-styles.js";
import type { SourceFile } from "./select.js";
import { parse, stripComments } from "./syntax.js";

/** Where the answer to a query is: a definition's lines in one file (1-based, inclusive). */
export interface Target {
  path: string;
  name: string;
  startLine: number;
  endLine: number;
}

export interface EvalQuery {
  text: string;
  /** Usually one; several definitions documented with the same words are all right answers. */
  targets: Target[];
}

export interface Corpus {
  files: number;
  queries: EvalQuery[];
  /** Documented definitions whose description was too short to be a question. */
  tooShort: number;
  /** Queries whose words were still in the code once comments were gone (in a string, say). */
  verbatim: number;
}

/** Lower-cased with whitespace collapsed: how "verbatim" is judged, so line breaks hide nothing. */
const normalize = (text: string) => text.toLowerCase().replace(/\s+/g, " ");

/**
 * Writes the package's sources to `root` with every comment (and Python docstring) removed, lines
 * kept so that a definition's line range is the same in both copies, and draws one query from each
 * documented definition.
 * Since the code the index sees has no comments, no query can be found by copying its text; a
 * query whose words appear in the stripped code anyway is dropped and counted.
 */
export async function buildCorpus(sources: readonly SourceFile[], root: string): Promise<Corpus> {
  const byText = new Map<string, Target[]>();
  const stripped: string[] = [];
  let tooShort = 0;
  for (const source of sources) {
    const style = styleOf(source.path);
    const tree = style && (await parse(source.path, source.text));
    if (!style || !tree) continue;
    let text: string;
    try {
      for (const { name, query, startLine, endLine } of style.documented(tree)) {
        if (!query) {
          tooShort++;
          continue;
        }
        byText.set(query, [...(byText.get(query) ?? []), { path: source.path, name, startLine, endLine }]);
      }
      text = stripComments(source.text, style.removed(tree));
    } finally {
      tree.delete();
    }
    await assertDocFree(source.path, text, style);
    if (text.split("\n").length !== source.text.split("\n").length)
      throw new Error(`${source.path}: removing comments changed the line count`);
    mkdirSync(dirname(join(root, source.path)), { recursive: true });
    writeFileSync(join(root, source.path), text);
    stripped.push(normalize(text));
  }
  const code = stripped.join("\0");
  const queries: EvalQuery[] = [];
  let verbatim = 0;
  for (const [text, targets] of byText) {
    if (code.includes(normalize(text))) verbatim++;
    else queries.push({ text, targets });
  }
  return { files: stripped.length, queries, tooShort, verbatim };
}

const styleOf = (path: string): DocStyle | undefined => {
  const language = languageOf(path);
  return language ? DOC_STYLES[language] : undefined;
};

/** The stripped copy is parsed again: a comment or docstring left in it would leak the answer to its query. */
async function assertDocFree(path: string, text: string, style: DocStyle): Promise<void> {
  const tree = await parse(path, text);
  if (!tree) return;
  try {
    const left = style.removed(tree);
    if (left.length > 0)
      throw new Error(
        `${path}: a comment survived stripping: ${text.slice(left[0]!.startIndex, left[0]!.startIndex + 80)}`,
      );
  } finally {
    tree.delete();
  }
}
