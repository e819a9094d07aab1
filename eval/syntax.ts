import type { Node, Tree } from "web-tree-sitter";
import { parserFor } from "../client/index/chunker.js";
import { languageOf } from "../client/index/languages.js";

/**
 * Parses a file with the grammar its extension selects, through the chunker's own parsers, so the
 * eval reads each file exactly as the index does; undefined for files without one.
 */
export async function parse(path: string, text: string): Promise<Tree | undefined> {
  const language = languageOf(path);
  if (!language) return undefined;
  return (await parserFor(language)).parse(text) ?? undefined;
}

/** Every comment node, in document order (line, block and doc comments alike). */
export function comments(tree: Tree): Node[] {
  const found: Node[] = [];
  const visit = (node: Node) => {
    if (node.type.includes("comment")) {
      found.push(node);
      return;
    }
    for (const child of node.children) if (child) visit(child);
  };
  visit(tree.rootNode);
  return found;
}

/** A span of a file the indexed copy leaves out, and what stands in its place (nothing, by default). */
export interface Removal {
  startIndex: number;
  endIndex: number;
  standIn?: string;
}

/**
 * The text with every removal made (in document order) and every line kept: a span across lines
 * becomes its stand-in and its line breaks, one within a line its stand-in or else a space (so
 * `a/*x*\/b` cannot fuse into one token). Positions are UTF-16 offsets, as web-tree-sitter reports
 * them for JavaScript strings.
 */
export function stripComments(text: string, removals: readonly Removal[]): string {
  let out = "";
  let at = 0;
  for (const removal of removals) {
    out += text.slice(at, removal.startIndex);
    const removed = text.slice(removal.startIndex, removal.endIndex);
    const breaks = removed.match(/\r?\n/g);
    out += (removal.standIn ?? "") + (breaks ? breaks.join("") : removal.standIn ? "" : " ");
    at = removal.endIndex;
  }
  return out + text.slice(at);
}

/** The named children of a node, without the nulls web-tree-sitter's typing allows. */
export const namedChildren = (node: Node): Node[] => node.namedChildren.filter((c): c is Node => c !== null);

/**
 * Every node below `root` whose type is in `types`, outermost first, in document order; the
 * search goes on inside a match (a method inside a class).
 */
export function descendants(root: Node, types: ReadonlySet<string>): Node[] {
  const found: Node[] = [];
  const visit = (node: Node) => {
    if (types.has(node.type)) found.push(node);
    for (const child of namedChildren(node)) visit(child);
  };
  visit(root);
  return found;
}

/** A documented definition: its doc comment and the lines it spans (1-based, inclusive). */
export interface Documented {
  name: string;
  doc: string;
  startLine: number;
  endLine: number;
}

/** Values that make `var x = …` or `a.b = …` a definition (ramda's `_curry2(function …)` is a call). */
const DEFINING_VALUES = new Set([
  "function",
  "function_expression",
  "generator_function",
  "arrow_function",
  "class",
  "call_expression",
]);

/** A comment about the whole file (express's "Module dependencies." above its requires), not what follows. */
const FILE_TAGS = /@(module|file|fileoverview|overview|license|copyright)\b/;

/** `require("x")` and `import("x")`: a dependency, not a definition. */
const isImport = (value: Node) =>
  value.type === "call_expression" && ["require", "import"].includes(value.childForFieldName("function")?.text ?? "");

const DECLARATIONS = new Set([
  "function_declaration",
  "generator_function_declaration",
  "function_signature",
  "class_declaration",
  "abstract_class_declaration",
  "method_definition",
  "method_signature",
  "abstract_method_signature",
]);

/** The name a node defines, or undefined when it is not a function, method or class definition. */
function definedName(node: Node): string | undefined {
  if (node.type === "export_statement") {
    const inner = node.childForFieldName("declaration") ?? node.childForFieldName("value");
    return inner ? definedName(inner) : undefined;
  }
  if (DECLARATIONS.has(node.type)) return node.childForFieldName("name")?.text ?? "default";
  if (node.type === "lexical_declaration" || node.type === "variable_declaration") {
    const declarators = node.namedChildren.filter((c) => c?.type === "variable_declarator");
    const value = declarators.length === 1 ? declarators[0]!.childForFieldName("value") : null;
    return value && DEFINING_VALUES.has(value.type) && !isImport(value)
      ? declarators[0]!.childForFieldName("name")?.text
      : undefined;
  }
  if (node.type === "expression_statement") {
    const expr = node.namedChildren[0];
    if (expr?.type !== "assignment_expression") return undefined;
    const right = expr.childForFieldName("right");
    return right && DEFINING_VALUES.has(right.type) && !isImport(right)
      ? expr.childForFieldName("left")?.text
      : undefined;
  }
  if (node.type === "public_field_definition" || node.type === "field_definition" || node.type === "pair") {
    const value = node.childForFieldName("value");
    const key = node.childForFieldName("name") ?? node.childForFieldName("property") ?? node.childForFieldName("key");
    return value && DEFINING_VALUES.has(value.type) ? key?.text : undefined;
  }
  return undefined;
}

/**
 * Functions, methods and classes (and `var x = …` / `a.b = …` function assignments) preceded by a
 * `/** … *\/` comment, with only blank lines or other comments between the two, the nearest one
 * counting (as JSDoc attaches them); a comment tagged as being about the whole file is left out. A
 * doc comment on the first of a run of TypeScript overloads documents the whole run, so the range
 * reaches the last declaration of the same name that follows without a gap.
 */
export function documentedDefinitions(tree: Tree): Documented[] {
  const found: Documented[] = [];
  const visit = (node: Node) => {
    const children = node.namedChildren.filter((c): c is Node => c !== null);
    for (let i = 0; i < children.length; i++) {
      const child = children[i]!;
      if (child.type.includes("comment")) {
        if (!child.text.startsWith("/**") || child.text.startsWith("/**/")) continue;
        let j = i + 1;
        let closer = false; // another doc comment nearer the definition: that one documents it
        for (; j < children.length && children[j]!.type.includes("comment"); j++)
          closer ||= children[j]!.text.startsWith("/**");
        const target = children[j];
        if (!target || closer || FILE_TAGS.test(child.text)) continue;
        const name = definedName(target);
        if (name === undefined) continue;
        let end = target;
        for (let k = j + 1; k < children.length; k++) {
          const next = children[k]!;
          if (next.type.includes("comment")) continue;
          if (definedName(next) !== name) break;
          end = next;
        }
        found.push({
          name,
          doc: child.text,
          startLine: target.startPosition.row + 1,
          endLine: end.endPosition.row + 1,
        });
        continue;
      }
      visit(child);
    }
  };
  visit(tree.rootNode);
  return found;
}
