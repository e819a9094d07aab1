import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { chunkFile, type Chunk } from "../../client/index/chunker.js";

const FIXTURES: Record<string, string> = {
  "a.ts": `import { x } from "y";\n\n/** Adds. */\nexport function add(a: number, b: number) {\n  return a + b;\n}\n\nexport class Box {\n  value = 1;\n  get() {\n    return this.value;\n  }\n}\n`,
  "a.py": `import os\n\n# Greets.\ndef greet(name):\n    return "hi " + name\n\nclass Greeter:\n    def run(self):\n        return greet("x")\n`,
  "a.go": `package main\n\nimport "fmt"\n\n// Main prints.\nfunc main() {\n\tfmt.Println("hi")\n}\n`,
  "a.rs": `use std::io;\n\n/// Adds.\nfn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nimpl Foo {\n    fn bar(&self) {}\n}\n`,
  "a.java": `package x;\n\npublic class A {\n  /** Adds. */\n  int add(int a, int b) { return a + b; }\n}\n`,
  "a.js": `const x = 1;\nfunction f() {\n  return x;\n}\n`,
  "a.tsx": `export const App = () => <div>hi</div>;\n`,
  "notes.md": `# Title\n\nSome text.\n`,
};

/** Every line of the file lies in some chunk, and each chunk's text is exactly its lines. */
function expectCovers(text: string, chunks: Chunk[], exact: boolean) {
  if (text === "") {
    expect(chunks).toEqual([]);
    return;
  }
  const lines = text.split("\n");
  if (lines.length > 1 && text.endsWith("\n")) lines.pop();
  const covered = new Array<number>(lines.length).fill(0);
  for (const chunk of chunks) {
    expect(chunk.id).toBe(createHash("sha256").update(chunk.text).digest("hex"));
    expect(chunk.startLine).toBeGreaterThanOrEqual(1);
    expect(chunk.endLine).toBeLessThanOrEqual(lines.length);
    const slice = lines.slice(chunk.startLine - 1, chunk.endLine).join("\n");
    if (chunk.startLine === chunk.endLine && slice.length > chunk.text.length) expect(slice).toContain(chunk.text);
    else expect(chunk.text).toBe(slice);
    for (let l = chunk.startLine; l <= chunk.endLine; l++) covered[l - 1]!++;
  }
  for (const [i, n] of covered.entries()) {
    expect(n, `line ${i + 1}`).toBeGreaterThan(0);
  }
  if (exact) {
    // Syntax chunks tile the file: in order, no gap, no overlap (pieces of one long line excepted).
    for (let i = 1; i < chunks.length; i++) {
      const prev = chunks[i - 1]!;
      const cur = chunks[i]!;
      expect(
        cur.startLine === prev.endLine + 1 || (cur.startLine === prev.endLine && cur.startLine === cur.endLine),
      ).toBe(true);
    }
  }
}

describe("chunker", () => {
  it.each(Object.entries(FIXTURES))("covers every line of %s", async (path, text) => {
    const chunks = await chunkFile(path, text);
    expect(chunks.length).toBeGreaterThan(0);
    expectCovers(text, chunks, !path.endsWith(".md"));
  });

  it("does not count the end of a final newline as another line", async () => {
    const chunks = await chunkFile("notes.txt", "one\ntwo\nthree\n");
    expect(chunks.map((c) => [c.startLine, c.endLine, c.text])).toEqual([[1, 3, "one\ntwo\nthree"]]);
  });

  it("keeps a definition whole with the comment above it", async () => {
    const chunks = await chunkFile("a.ts", FIXTURES["a.ts"]!, { targetChars: 10, maxChars: 2000 });
    const add = chunks.find((c) => c.text.includes("function add"))!;
    expect(add.text).toContain("/** Adds. */");
    expect(add.text).toContain("return a + b;");
  });

  it("splits a large class at its members and bounds every chunk", async () => {
    const methods = Array.from({ length: 40 }, (_, i) => `  method${i}() {\n    return ${i};\n  }\n`).join("\n");
    const text = `export class Big {\n${methods}}\n`;
    const chunks = await chunkFile("big.ts", text, { targetChars: 300, maxChars: 600 });
    expect(chunks.length).toBeGreaterThan(3);
    for (const chunk of chunks) expect(chunk.text.length).toBeLessThanOrEqual(600);
    expectCovers(text, chunks, true);
  });

  it("covers every line of any text, in every language, within the size bound", async () => {
    const line = fc.oneof(
      fc.constantFrom(
        "function f() {",
        "}",
        "class A {",
        "def g():",
        "    return 1",
        "// note",
        "",
        "import x",
        "fn h() {",
        "x = [",
        "]",
      ),
      fc.string({ maxLength: 80 }).map((s) => s.replace(/\n/g, " ")),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...Object.keys(FIXTURES)),
        fc.array(line, { minLength: 1, maxLength: 120 }),
        async (path, lines) => {
          const text = lines.join("\n");
          const chunks = await chunkFile(path, text, { targetChars: 200, maxChars: 400 });
          for (const chunk of chunks) expect(chunk.text.length).toBeLessThanOrEqual(400);
          expectCovers(text, chunks, !path.endsWith(".md"));
        },
      ),
      { numRuns: 150 },
    );
  });

  it("cuts a single very long line into bounded pieces", async () => {
    const text = `const data = "${"x".repeat(5000)}";\n`;
    const chunks = await chunkFile("min.js", text, { maxChars: 1000 });
    for (const chunk of chunks) expect(chunk.text.length).toBeLessThanOrEqual(1000);
    expect(chunks.map((c) => c.text).join("")).toContain("x".repeat(4000));
  });

  it("covers every line of this repository's own sources", async () => {
    for (const dir of ["client/workspace", "workers/routes", "durable-objects"]) {
      for (const name of readdirSync(dir)) {
        if (!name.endsWith(".ts")) continue;
        const text = readFileSync(join(dir, name), "utf8");
        expectCovers(text, await chunkFile(name, text), true);
      }
    }
  });
});
