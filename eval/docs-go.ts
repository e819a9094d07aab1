import type { Node } from "web-tree-sitter";
import type { DocStyle, DocumentedQuery } from "./doc-styles.js";
import { linkText, queryFromDescription } from "./doc-text.js";
import { comments, descendants, namedChildren } from "./syntax.js";

const DECLARATIONS = new Set([
  "function_declaration",
  "method_declaration",
  "type_declaration",
  "type_spec",
  "type_alias",
]);
/** Nodes whose children may be a doc comment and the declaration it documents. */
const SCOPES = new Set(["source_file", "type_declaration"]);

/** The name a declaration gives; a `type ( … )` group of several names is no one definition. */
function declaredName(node: Node): string | undefined {
  if (node.type !== "type_declaration") return node.childForFieldName("name")?.text;
  const specs = namedChildren(node).filter((c) => c.type === "type_spec" || c.type === "type_alias");
  return specs.length === 1 ? specs[0]!.childForFieldName("name")?.text : undefined;
}

/**
 * The `//` comments directly above `children[i]`, as Go reads a doc comment: a run of line
 * comments, each on the line after the one before, the last on the line before the declaration,
 * none trailing code on its own line.
 */
function docBlockAbove(children: readonly Node[], i: number): Node[] {
  const block: Node[] = [];
  let below = children[i]!;
  for (let j = i - 1; j >= 0; j--) {
    const comment = children[j]!;
    if (comment.type !== "comment" || !comment.text.startsWith("//")) break;
    if (comment.endPosition.row + 1 !== below.startPosition.row) break;
    if (j > 0 && children[j - 1]!.endPosition.row === comment.startPosition.row) break;
    block.unshift(comment);
    below = comment;
  }
  return block;
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/**
 * A Go doc comment's description: `//` markers and directives (`//go:generate`) gone, doc links
 * (`[Name]`, `[pkg.Name]`) reduced to their names, and the declared name dropped from the front.
 * Go's convention opens every doc with the name ("Equal reports whether …"), which nobody who is
 * looking for the function knows yet; kept, it would hand both systems the identifier.
 */
export function goDescription(lines: readonly string[], name: string): string {
  const text = lines
    .filter((line) => !/^\/\/[a-z0-9]+:\S/.test(line))
    .map((line) => line.replace(/^\/\/ ?/, ""))
    .join("\n");
  return linkText(text).replace(new RegExp(`^\\s*${escapeRegExp(name)}\\s+`), "");
}

/** Functions, methods and types with a doc comment; the indexed copy loses every comment. */
export const goStyle: DocStyle = {
  documented: (tree) =>
    descendants(tree.rootNode, SCOPES).flatMap((scope) => {
      const children = namedChildren(scope);
      return children.flatMap((node, i): DocumentedQuery[] => {
        const name = DECLARATIONS.has(node.type) ? declaredName(node) : undefined;
        const block = name === undefined ? [] : docBlockAbove(children, i);
        if (name === undefined || block.length === 0) return [];
        const query = queryFromDescription(
          goDescription(
            block.map((c) => c.text),
            name,
          ),
        );
        return [{ name, query, startLine: node.startPosition.row + 1, endLine: node.endPosition.row + 1 }];
      });
    }),
  removed: comments,
};
