import type { Node, Tree } from "web-tree-sitter";
import type { DocStyle, DocumentedQuery } from "./doc-styles.js";
import { linkText, queryFromDescription } from "./doc-text.js";
import { comments, descendants, namedChildren } from "./syntax.js";

const ITEMS = new Set([
  "function_item",
  "function_signature_item",
  "struct_item",
  "enum_item",
  "union_item",
  "trait_item",
  "type_item",
  "macro_definition",
  "mod_item",
]);
/** Nodes whose children may be doc comments and the items they document. */
const SCOPES = new Set(["source_file", "declaration_list"]);
const COMMENTS = new Set(["line_comment", "block_comment"]);

/** `///` and `/** … *\/` document the item after them; `////` and `/***` are plain comments. */
const isOuterDoc = (node: Node) =>
  (node.type === "line_comment" && /^\/\/\/(?!\/)/.test(node.text)) ||
  (node.type === "block_comment" && /^\/\*\*(?![*/])/.test(node.text));
/** `//!` and `/*! … *\/` document the item they are in: the module, or the crate in its root file. */
const isInnerDoc = (node: Node) => COMMENTS.has(node.type) && /^\/(\/|\*)!/.test(node.text);

/**
 * The outer doc comments of `children[i]`, as rustdoc collects them: every `///` or `/** … *\/` above
 * it, through attributes (`#[inline]`) and plain comments, up to anything else.
 */
function outerDocs(children: readonly Node[], i: number): Node[] {
  const docs: Node[] = [];
  for (let j = i - 1; j >= 0; j--) {
    const node = children[j]!;
    if (isOuterDoc(node)) docs.unshift(node);
    else if (node.type !== "attribute_item" && !(COMMENTS.has(node.type) && !isInnerDoc(node))) break;
  }
  return docs;
}

/** A doc comment's Markdown: `///`, `//!`, `/** … *\/` and `/*! … *\/` markers gone, links reduced to their words. */
export function rustDescription(docs: readonly string[]): string {
  const lines = docs.flatMap((doc) =>
    doc.startsWith("/*")
      ? doc
          .replace(/^\/\*[*!]/, "")
          .replace(/\*\/$/, "")
          .split(/\r?\n/)
          .map((line) => line.replace(/^\s*\* ?/, ""))
      : [doc.replace(/^\/\/[/!] ?/, "")],
  );
  return linkText(lines.join("\n"));
}

/** The item a run of inner docs belongs to: the module around it, or the whole file at its top. */
function innerDocTarget(tree: Tree, scope: Node): Omit<DocumentedQuery, "query"> | undefined {
  if (scope.type === "source_file")
    return { name: "(module)", startLine: 1, endLine: tree.rootNode.endPosition.row + 1 };
  const item = scope.parent;
  if (item?.type !== "mod_item") return undefined;
  const name = item.childForFieldName("name")?.text ?? "";
  return { name, startLine: item.startPosition.row + 1, endLine: item.endPosition.row + 1 };
}

/** Items with outer docs, and modules with inner ones; the indexed copy loses every comment. */
export const rustStyle: DocStyle = {
  documented: (tree) =>
    descendants(tree.rootNode, SCOPES).flatMap((scope) => {
      const children = namedChildren(scope);
      const found: DocumentedQuery[] = [];
      const inner = children.filter(isInnerDoc);
      const module = inner.length > 0 ? innerDocTarget(tree, scope) : undefined;
      if (module) found.push({ ...module, query: queryFromDescription(rustDescription(inner.map((c) => c.text))) });
      children.forEach((node, i) => {
        if (!ITEMS.has(node.type)) return;
        const docs = outerDocs(children, i);
        if (docs.length === 0) return;
        const query = queryFromDescription(rustDescription(docs.map((c) => c.text)));
        const name = node.childForFieldName("name")?.text ?? "";
        found.push({ name, query, startLine: node.startPosition.row + 1, endLine: node.endPosition.row + 1 });
      });
      return found;
    }),
  removed: comments,
};
