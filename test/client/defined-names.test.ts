import { describe, expect, it } from "vitest";
import { definedNames } from "../../protocol/embedder/names.js";
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

  it("counts a defined name's keyed terms once more in the lexical channel, and nothing else", () => {
    const key = new TermKey(new Uint8Array(32).fill(3));
    const code = "export function parseConfig(text) {\n  return parse(text, config);\n}\n";
    const count = (t: { ids: Uint32Array; counts: Uint16Array }) =>
      new Map([...t.ids].map((id, i) => [id, t.counts[i]!]));
    const [plain, chunk] = [count(key.terms(code)), count(key.chunk(code))];
    const named = new Set(key.query("parseConfig"));
    expect(named.size).toBe(3); // parse, config and the whole name
    for (const [id, n] of chunk) expect(n).toBe((plain.get(id) ?? 0) + (named.has(id) ? 1 : 0));
    expect([...plain.keys()].every((id) => chunk.has(id))).toBe(true);
    // Code that defines nothing keeps its counts.
    expect(key.chunk("x = parse(config)")).toEqual(key.terms("x = parse(config)"));
  });
});
