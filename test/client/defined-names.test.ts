import { describe, expect, it } from "vitest";
import { definedNames, definitionPieces } from "../../protocol/embedder/names.js";
import { ModelTokenizer } from "../../protocol/embedder/static.js";
import { TermKey } from "../../protocol/keyed-terms.js";

describe("the names a chunk defines", () => {
  it("finds JavaScript and TypeScript declarations, methods and assignments", () => {
    const js = `export async function readConfig(path) {
  const text = await load(path);
  return parse(text);
}
export const mergeDeep = (a, b) => ({ ...a, ...b });
var _interop = _interopRequireDefault(require("./x"));
const fs = require("fs");
class TokenBucket extends Base {
  static async refill(now: number): Promise<void> {
    if (now > 0) { this.tokens++; }
    for (const x of []) {}
  }
  get capacity() { return 1; }
}
exports.eachLimit = eachLimit;
Stream.prototype.pipeThrough = function (dest) {};
interface Options<T> { depth: number }
type Handler = () => void;
enum Colour { Red }`;
    expect(definedNames(js)).toEqual([
      "readConfig",
      "TokenBucket",
      "Options",
      "Handler",
      "Colour",
      "mergeDeep",
      "eachLimit",
      "pipeThrough",
      "refill",
      "capacity",
    ]);
  });

  it("finds Python, Go and Rust definitions, Go methods by their name rather than their receiver", () => {
    expect(definedNames("class Parser(object):\n    def parse_isoformat(self, s):\n        return s\n")).toEqual([
      "Parser",
      "parse_isoformat",
    ]);
    expect(
      definedNames(
        "func (s *state) compareAny(step PathStep) {\n}\nfunc Equal(x, y interface{}) bool {\n}\ntype Option interface{}",
      ),
    ).toEqual(["Option", "compareAny", "Equal"]);
    expect(
      definedNames(
        "pub struct Dedup<I> { iter: I }\nimpl<I: Iterator> Iterator for Dedup<I> {\n    fn next(&mut self) -> Option<I::Item> { None }\n}\npub trait Itertools {}",
      ),
    ).toEqual(["Dedup", "Iterator", "next", "Itertools"]);
  });

  it("finds nothing in code that defines nothing, and never throws on odd text", () => {
    expect(definedNames("x = compute(a, b)\nif (ready) {\n  run();\n}\n")).toEqual([]);
    for (const odd of ["", "function", "function (", "\u0000def \uD800", "class 函数 {}", "fn ".repeat(10_000)])
      expect(Array.isArray(definedNames(odd))).toBe(true);
  });

  it("gives the model the names' terms once each, split and stemmed as the rest of the text", () => {
    const tokenizer = new ModelTokenizer();
    const code = "export function parseConfigFile(path) { return parseConfig(read(path)); }";
    expect(tokenizer.nameTerms(code)).toEqual(["pars", "config", "fil"]);
    for (const term of tokenizer.nameTerms(code)) expect(tokenizer.terms(code)).toContain(term);
  });

  it("keys a defined name's terms in a field of their own, which a question's terms also look in", () => {
    const key = new TermKey(new Uint8Array(32).fill(3));
    const code = "export function parseConfig(text) {\n  return parse(text, config);\n}\n";
    const count = (t: { ids: Uint32Array; counts: Uint16Array }) =>
      new Map([...t.ids].map((id, i) => [id, t.counts[i]!]));
    const [plain, chunk] = [count(key.terms(code)), count(key.chunk(code))];
    // parse, config and the whole name, once each in the names' field; the text's own terms unchanged.
    const named = ["pars", "config", "#parseconfig"].map((t) => key.nameId(t));
    expect(new Set(named).size).toBe(3);
    for (const id of named) expect(chunk.get(id)).toBe(1);
    for (const [id, n] of plain) expect(chunk.get(id)).toBe(n);
    expect(chunk.size).toBe(plain.size + 3);
    // A name's id is never a body term's: the field is apart even for the same word.
    for (const id of named) expect(plain.has(id)).toBe(false);
    // A question's words ask both fields; an identifier in it asks the names' field by its whole only.
    expect(key.question("parse the config")).toEqual([
      key.id("pars"),
      key.nameId("pars"),
      key.id("config"),
      key.nameId("config"),
    ]);
    expect(key.question("parseConfig")).toEqual([
      key.id("pars"),
      key.id("config"),
      key.id("#parseconfig"),
      key.nameId("#parseconfig"),
    ]);
    expect(key.question("parse parseConfig")).toContain(key.nameId("pars"));
    // Code that defines nothing keeps its counts.
    expect(key.chunk("x = parse(config)")).toEqual(key.terms("x = parse(config)"));
  });
});

describe("a chunk's definition pieces", () => {
  const chunk = [
    'import { x } from "./x";',
    "export function first(a) {",
    "  return a + 1;",
    "}",
    "",
    "export function second(b) {",
    "  if (b) return b;",
    "}",
    "def third(c):",
    "    return c",
  ].join("\n");

  it("cuts before each line that defines a name, every line kept once and in order", () => {
    const pieces = definitionPieces(chunk, 4);
    // The lines above the first definition are a piece of their own.
    expect(pieces.map((p) => definedNames(p))).toEqual([[], ["first"], ["second"], ["third"]]);
    expect(pieces[0]).toBe('import { x } from "./x";');
    expect(pieces.join("\n")).toBe(chunk);
  });

  it("joins the shortest neighbours until at most cap pieces are left", () => {
    expect(definitionPieces(chunk, 3).map((p) => definedNames(p))).toEqual([["first"], ["second"], ["third"]]);
    // What the index holds: at most 3.
    expect(definitionPieces(chunk)).toEqual(definitionPieces(chunk, 3));
    const pieces = definitionPieces(chunk, 2);
    expect(pieces.join("\n")).toBe(chunk);
    expect(pieces.map((p) => definedNames(p))).toEqual([["first"], ["second", "third"]]);
  });

  it("gives none for a chunk of one definition, or of none", () => {
    expect(definitionPieces("function only() {\n  return 1;\n}")).toEqual([]);
    expect(definitionPieces("const a = require('a');\nfoo(a);\n")).toEqual([]);
    expect(definitionPieces("")).toEqual([]);
  });
});
