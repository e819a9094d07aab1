import type { Node } from "web-tree-sitter";
import type { DocStyle } from "./doc-styles.js";
import { queryFromDescription } from "./doc-text.js";
import { comments, descendants, namedChildren, type Removal } from "./syntax.js";

const STRINGS = new Set(["string", "concatenated_string"]);
const DEFINITIONS = new Set(["function_definition", "class_definition"]);

/** A statement that is a string literal and nothing else: a docstring, or a note written as one. */
const isStringStatement = (node: Node) => {
  const inner = namedChildren(node);
  return node.type === "expression_statement" && inner.length === 1 && STRINGS.has(inner[0]!.type);
};

/** A function's or class's docstring: the first statement of its body, when that is a string. */
function docstringOf(definition: Node): Node | undefined {
  const body = definition.childForFieldName("body");
  const first = body ? namedChildren(body).find((c) => c.type !== "comment") : undefined;
  return first && isStringStatement(first) ? first : undefined;
}

/**
 * A docstring's value as `inspect.cleandoc` gives it: prefix and quotes gone, the first line
 * trimmed, the others dedented by their common indentation. Escapes are left as written.
 */
export function docstringValue(literal: string): string {
  const parts = literal.match(/[rRuUbBfF]*("""|'''|"|')[\s\S]*?(?<!\\)\1/g) ?? [literal];
  const body = parts.map((part) => part.replace(/^[rRuUbBfF]*("""|'''|"|')/, "").replace(/("""|'''|"|')$/, ""));
  const lines = body.join("").split(/\r?\n/);
  const indents = lines.slice(1).flatMap((line) => (line.trim() ? [line.length - line.trimStart().length] : []));
  const indent = indents.length > 0 ? Math.min(...indents) : 0;
  return [lines[0]!.trim(), ...lines.slice(1).map((line) => line.slice(indent))].join("\n").trim();
}

/**
 * Where a docstring's description ends: a reST field (`:param x:`), directive or doctest, an epydoc
 * tag, or a Google or NumPy section heading.
 */
const SECTION =
  /^\s*(:\w[^:\n]*:|\.\.\s|>>>|@\w+)|^\s*(args|arguments|parameters|params|returns?|yields?|raises|examples?|notes?|attributes|methods|see also|warnings?|references|keyword arguments|other parameters|todo)\s*:?\s*$/i;

/** A reST role's text as it shows: `~a.b.c` shows `c`, `label <target>` shows `label`. */
const roleText = (content: string) => {
  const label = content.replace(/\s*<[^>]*>$/, "");
  return label.startsWith("~") ? label.slice(1).split(".").pop()! : label.replace(/^!/, "");
};

/** The description of a docstring, with reST's inline markup reduced to the words it shows. */
export function docstringDescription(value: string): string {
  const lines = value.split("\n");
  const end = lines.findIndex((line) => SECTION.test(line));
  return (end < 0 ? lines : lines.slice(0, end))
    .join("\n")
    .replace(/(?::[\w.+-]+)+:`([^`]*)`/g, (_, content: string) => roleText(content))
    .replace(/`([^`<]+?)\s*<[^>]*>`_{1,2}/g, "$1")
    .replace(/`([^`]+)`_{1,2}/g, "$1")
    .replace(/::$/gm, ":");
}

/**
 * Python documents a function or class with a docstring, so the indexed copy loses every string
 * statement (docstrings, and notes written as strings) besides every comment. A removed string
 * leaves `...` behind: a body that held only its docstring must still hold a statement.
 */
export const pythonStyle: DocStyle = {
  documented: (tree) =>
    descendants(tree.rootNode, DEFINITIONS).flatMap((definition) => {
      const docstring = docstringOf(definition);
      if (!docstring) return [];
      const outer = definition.parent?.type === "decorated_definition" ? definition.parent : definition;
      return [
        {
          name: definition.childForFieldName("name")?.text ?? "",
          query: queryFromDescription(docstringDescription(docstringValue(docstring.text))),
          startLine: outer.startPosition.row + 1,
          endLine: outer.endPosition.row + 1,
        },
      ];
    }),
  removed: (tree) => {
    const strings: Removal[] = descendants(tree.rootNode, new Set(["expression_statement"]))
      .filter(isStringStatement)
      .map(({ startIndex, endIndex }) => ({ startIndex, endIndex, standIn: "..." }));
    return [...comments(tree), ...strings].sort((a, b) => a.startIndex - b.startIndex);
  },
};
