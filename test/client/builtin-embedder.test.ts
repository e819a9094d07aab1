import { describe, expect, it } from "vitest";
import { embedBuiltin } from "../../protocol/embedder/builtin.js";
import { splitIdentifier, stem, tokenize } from "../../protocol/embedder/tokens.js";

const cosine = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i]!, 0);

describe("built-in embedder", () => {
  it("splits identifiers into their words", () => {
    expect(splitIdentifier("readFileContents")).toEqual(["read", "file", "contents"]);
    expect(splitIdentifier("HTTPServerError")).toEqual(["http", "server", "error"]);
    expect(splitIdentifier("max_retry_delay")).toEqual(["max", "retry", "delay"]);
    expect(splitIdentifier("utf8Decode")).toEqual(["utf", "decode"]);
  });

  it("stems lightly and drops keywords and stop words", () => {
    expect(new Set(["parse", "parses", "parsing", "parsed"].map(stem))).toEqual(new Set(["pars"]));
    expect(stem("files")).toBe(stem("file"));
    expect(stem("class")).toBe("class");
    expect(tokenize("const x = function() { return this; }").map((t) => t.term)).toEqual([]);
  });

  it("weights names being defined double and keeps the whole identifier", () => {
    const tokens = tokenize("function parseConfig(text) {}");
    expect(tokens.filter((t) => t.weight === 2).map((t) => t.term)).toEqual([stem("parse"), "config", "#parseconfig"]);
  });

  it("ranks the code that matches a question above code that does not", () => {
    const query = embedBuiltin("read the contents of a file");
    const right = embedBuiltin("export function readFileContents(path: string) { return fs.readFileSync(path); }");
    const wrong = embedBuiltin("export class HttpRetryPolicy { delayMs(attempt) { return 2 ** attempt; } }");
    expect(cosine(query, right)).toBeGreaterThan(cosine(query, wrong));
  });

  it("returns unit vectors, and zero for text without words", () => {
    const v = embedBuiltin("merkle tree sync");
    expect(cosine(v, v)).toBeCloseTo(1, 5);
    expect(embedBuiltin("{}();").every((x) => x === 0)).toBe(true);
  });
});
