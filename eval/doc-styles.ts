import type { Tree } from "web-tree-sitter";
import type { LANGUAGES } from "../client/index/languages.js";
import { queryFromDoc } from "./doc-text.js";
import { goStyle } from "./docs-go.js";
import { pythonStyle } from "./docs-python.js";
import { rustStyle } from "./docs-rust.js";
import { comments, documentedDefinitions, type Removal } from "./syntax.js";

/** A documented definition and the question its doc gives (undefined: too short to be one). */
export interface DocumentedQuery {
  name: string;
  query: string | undefined;
  /** The definition's lines, 1-based and inclusive: the answer to the query. */
  startLine: number;
  endLine: number;
}

/**
 * How one language documents its code, as the eval reads it: which definitions carry a doc and the
 * question each gives, and what the indexed copy leaves out so that no doc text reaches the index.
 */
export interface DocStyle {
  documented: (tree: Tree) => DocumentedQuery[];
  removed: (tree: Tree) => Removal[];
}

const jsStyle: DocStyle = {
  documented: (tree) => documentedDefinitions(tree).map(({ doc, ...def }) => ({ ...def, query: queryFromDoc(doc) })),
  removed: comments,
};

/** The languages the eval draws queries from; the chunker parses a few more that it does not. */
export const DOC_STYLES: Partial<Record<keyof typeof LANGUAGES, DocStyle>> = {
  javascript: jsStyle,
  typescript: jsStyle,
  tsx: jsStyle,
  python: pythonStyle,
  go: goStyle,
  rust: rustStyle,
};
