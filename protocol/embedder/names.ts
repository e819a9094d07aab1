/**
 * The names a chunk of code defines: what a question about the code most often describes. Found by
 * the declaration forms of the languages the index parses (JavaScript and TypeScript, Python, Go,
 * Rust), from the text alone, so the Worker, the trainer and the dev eval read them alike without a
 * parser. A name that is not one (a local `const` inside a body, say) only costs a little weight.
 */
const IDENT = String.raw`[A-Za-z_$][\w$]*`;

const FORMS: readonly RegExp[] = [
  // function f, class C, def f, fn f, interface I, type T, struct S, enum E, trait T, impl<T> T, mod m.
  new RegExp(
    String.raw`\b(?:function\s*\*?|class|def|fn|interface|type|struct|enum|trait|mod|impl(?:\s*<[^>{]*>)?)\s+(${IDENT})`,
    "g",
  ),
  // Go: func f(…) and func (r *T) f(…).
  new RegExp(String.raw`\bfunc\s+(?:\([^)]*\)\s*)?(${IDENT})\s*[(\[]`, "g"),
  // A top-level binding, not an import: const f = …, export let f: T = …, but not const x = require(…).
  new RegExp(
    String.raw`^(?:export\s+)?(?:declare\s+)?(?:const|let|var)\s+(${IDENT})\s*(?::[^=\n]*)?=(?!\s*(?:require|_interopRequire\w*)\()`,
    "gm",
  ),
  // exports.f = …, module.exports.f = …, Foo.prototype.f = …
  new RegExp(String.raw`\b(?:exports|prototype)\.(${IDENT})\s*=`, "g"),
  // A method: name(args) {, async name(args): T {, static get name() {
  new RegExp(
    String.raw`^[ \t]*(?:(?:public|private|protected|static|async|get|set|readonly|override|abstract)\s+)*(${IDENT})\s*(?:<[^>\n]*>)?\s*\([^)\n]*\)\s*(?::[^{\n]*)?\{`,
    "gm",
  ),
];

/** Words the method form matches that are statements, not names. */
const NOT_NAMES = new Set(["if", "for", "while", "switch", "catch", "with", "function", "return", "else", "do"]);

/** The distinct names `text` defines, in first-seen order. */
export function definedNames(text: string): string[] {
  const names = new Set<string>();
  for (const form of FORMS)
    for (const match of text.matchAll(form)) {
      const name = match[1]!;
      if (!NOT_NAMES.has(name)) names.add(name);
    }
  return [...names];
}

/** Definition pieces a chunk is cut into at most, and so the extra vectors an index holds per chunk. */
export const MAX_DEFINITION_PIECES = 3;

/**
 * A chunk's text cut before each line that defines a name (`definedNames` of the line alone), at
 * most `cap` pieces (the two adjacent pieces shortest together are joined until it fits); none when
 * the chunk holds at most one definition. Each piece embedded on its own keeps one definition's
 * words from being blurred by its neighbours' in the chunk's single vector.
 */
export function definitionPieces(text: string, cap = MAX_DEFINITION_PIECES): string[] {
  const pieces: string[] = [];
  let current: string[] = [];
  for (const line of text.split("\n")) {
    if (current.some((l) => l.trim() !== "") && definedNames(line).length > 0) {
      pieces.push(current.join("\n"));
      current = [];
    }
    current.push(line);
  }
  if (current.some((l) => l.trim() !== "")) pieces.push(current.join("\n"));
  while (pieces.length > Math.max(1, cap)) {
    let at = 0;
    for (let i = 1; i + 1 < pieces.length; i++)
      if (pieces[i]!.length + pieces[i + 1]!.length < pieces[at]!.length + pieces[at + 1]!.length) at = i;
    pieces.splice(at, 2, `${pieces[at]}\n${pieces[at + 1]}`);
  }
  return pieces.length > 1 ? pieces : [];
}
