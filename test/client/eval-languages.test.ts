import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { buildCorpus, type Corpus } from "../../eval/corpus.js";
import { docstringDescription, docstringValue } from "../../eval/docs-python.js";
import { isHeldOut, mayEvaluate, parseSpec } from "../../eval/packages.js";
import { listFiles, selectSources } from "../../eval/select.js";
import { parse } from "../../eval/syntax.js";
import { makeTree } from "../support/fixture.js";

/** Small libraries in the three languages the Debian corpora bring, each documented its own way. */
const LIBRARY = {
  "geo/shapes.py": `"""Shapes on a plane, as plain functions."""
import math


def circle_area(radius):
    """Compute the area enclosed by a circle of the given radius.

    :param radius: the circle's radius, in metres
    :returns: the area
    """
    return math.pi * radius ** 2  # walrus: a comment to strip


@staticmethod
def perimeter(sides):
    r'''Add up the lengths of every side of a polygon, like :func:\`~geo.shapes.circle_area\`.'''
    return sum(sides)


class Grid:
    """A rectangular grid of cells that can be walked row by row.

    Args:
        width: cells per row
    """

    def cells(self):
        """Short."""

    def neighbours(self, x, y):
        # heron: a comment above the docstring
        """List the cells that share an edge with the cell at \`\`x\`\`, \`\`y\`\`."""
        "a bare string statement, a note that is stripped as well"
        return []
`,
  "ring/ring.go": `// Package ring keeps a fixed number of recent values.
package ring

import "fmt"

// Buffer holds the most recent values pushed into it, oldest first.
type Buffer struct {
	items []int
}

// New returns an empty [Buffer] that keeps at most size values.
//
// It panics when size is not positive.
func New(size int) *Buffer {
	if size <= 0 {
		panic(fmt.Sprintf("ring: size %d", size)) // otter: a trailing comment
	}
	return &Buffer{items: make([]int, 0, size)}
}

// Push adds a value, dropping the oldest one once the buffer is full.
//go:noinline
func (b *Buffer) Push(v int) {
	b.items = append(b.items, v)
}

// A stray comment, a blank line away from what follows.

func helper() {}

type (
	// Sum adds up every value currently held in a buffer of integers.
	Sum func(*Buffer) int
)
`,
  "ring/ring_test.go": `package ring

// TestPush checks that pushing a value into a full buffer drops the oldest.
func TestPush() {}
`,
  "src/lib.rs": `//! Tallies of words, counted as they stream past.

use std::collections::HashMap;

/// Counts how many times each word appears in a text, ignoring case.
///
/// # Examples
///
/// \`\`\`
/// let t = tally("a A b");
/// \`\`\`
#[must_use]
pub fn tally(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word.to_lowercase()).or_insert(0) += 1; /* badger */
    }
    counts
}

/** Keeps the [\`Leader::offer\`]ed word with the highest count seen so far. */
pub struct Leader {
    best: Option<(String, usize)>,
}

impl Leader {
    /// Offers a word and its count, replacing the leader when the count is higher.
    pub fn offer(&mut self, word: &str, count: usize) {
        if self.best.as_ref().map_or(true, |(_, c)| count > *c) {
            self.best = Some((word.to_string(), count));
        }
    }
}

//// Four slashes make a plain comment, not a doc comment at all.
fn private_helper() {}

mod ranking {
    //! Orders tallies from the most to the least frequent word.
    pub fn top() {}
}
`,
};

const querySet = (corpus: Corpus, path: string) =>
  Object.fromEntries(
    corpus.queries.flatMap((q) =>
      q.targets.filter((t) => t.path === path).map((t) => [q.text, [t.name, t.startLine, t.endLine]]),
    ),
  );

describe("the eval's Python, Go and Rust corpora", () => {
  const library = makeTree(LIBRARY, "sextant-eval-langs-");
  const indexed = makeTree({}, "sextant-eval-langs-indexed-");
  afterAll(() => {
    for (const dir of [library, indexed]) rmSync(dir, { recursive: true, force: true });
  });
  const corpus = buildCorpus(selectSources(library, { roots: [""], exclude: [] }), indexed);
  const indexedText = (path: string) => readFileSync(join(indexed, path), "utf8");

  it("asks the first sentence of each Python docstring, for the function or class it opens", async () => {
    expect(querySet(await corpus, "geo/shapes.py")).toEqual({
      "Compute the area enclosed by a circle of the given radius.": ["circle_area", 5, 11],
      "Add up the lengths of every side of a polygon, like circle_area.": ["perimeter", 14, 17],
      "A rectangular grid of cells that can be walked row by row.": ["Grid", 20, 34],
      "List the cells that share an edge with the cell at x, y.": ["neighbours", 30, 34],
    });
  });

  it("asks a Go doc comment without its declared name, for the declaration right below it", async () => {
    expect(querySet(await corpus, "ring/ring.go")).toEqual({
      "holds the most recent values pushed into it, oldest first.": ["Buffer", 7, 9],
      "returns an empty Buffer that keeps at most size values.": ["New", 14, 19],
      "adds a value, dropping the oldest one once the buffer is full.": ["Push", 23, 25],
      "adds up every value currently held in a buffer of integers.": ["Sum", 33, 33],
    });
  });

  it("asks Rust's ///, /** */ and //! docs, for the item, the module or the file they document", async () => {
    expect(querySet(await corpus, "src/lib.rs")).toEqual({
      "Tallies of words, counted as they stream past.": ["(module)", 1, 42],
      "Counts how many times each word appears in a text, ignoring case.": ["tally", 13, 19],
      "Keeps the Leader::offered word with the highest count seen so far.": ["Leader", 22, 24],
      "Offers a word and its count, replacing the leader when the count is higher.": ["offer", 28, 32],
      "Orders tallies from the most to the least frequent word.": ["ranking", 38, 41],
    });
  });

  it("leaves Go tests out, and counts a doc too short to ask", async () => {
    const { files, tooShort, verbatim } = await corpus;
    expect(listFiles(indexed)).toEqual(["geo/shapes.py", "ring/ring.go", "src/lib.rs"]);
    expect({ files, tooShort, verbatim }).toEqual({ files: 3, tooShort: 1, verbatim: 0 });
  });

  it("indexes each file without its docstrings and comments, lines kept, still valid code", async () => {
    await corpus;
    for (const path of ["geo/shapes.py", "ring/ring.go", "src/lib.rs"]) {
      const text = indexedText(path);
      expect(text.split("\n").length, path).toBe(LIBRARY[path as keyof typeof LIBRARY].split("\n").length);
      for (const leak of ['"""', "'''", "#", "//", "/*", "walrus", "heron", "bare string", "otter", "badger"])
        expect(text.includes(leak) && !(path.endsWith(".rs") && leak === "#"), `${path}: ${leak}`).toBe(false);
      const tree = (await parse(path, text))!;
      expect(tree.rootNode.hasError, path).toBe(false);
      tree.delete();
    }
    expect(indexedText("geo/shapes.py")).toContain("    def cells(self):\n        ...\n");
    expect(indexedText("ring/ring.go")).toContain("func (b *Buffer) Push(v int) {");
    expect(indexedText("src/lib.rs")).toContain("#[must_use]\npub fn tally(text: &str)");
  });

  it("reads a docstring as inspect.cleandoc does and reduces its reST to the words it shows", () => {
    expect(docstringValue('r"""First line.\n\n        Indented more.\n    Less."""')).toBe(
      "First line.\n\n    Indented more.\nLess.",
    );
    expect(
      docstringDescription(
        "Return the :class:`Thing <pkg.Thing>` that `the docs`_ describe::\n\nParameters\n----------\nx : int",
      ),
    ).toBe("Return the Thing that the docs describe:\n");
  });
});

describe("held-out Debian packages", () => {
  it("refuses HELD-OUT.md's Debian packages by name, and their code by folder", () => {
    for (const name of [
      "python3-werkzeug",
      "python3-flask",
      "python3-click",
      "golang-golang-x-text-dev",
      "librust-petgraph-dev",
      "librust-petgraph+serde-dev",
      "librust-regex-syntax-dev",
      "librust-regex-syntax-0.6-dev",
    ])
      expect(mayEvaluate(name), name).toBe(false);
    for (const path of [
      "usr/lib/python3/dist-packages/werkzeug/routing.py",
      "usr/lib/python3/dist-packages/click/core.py",
      "usr/share/gocode/src/golang.org/x/text/language/tags.go",
      "usr/share/cargo/registry/petgraph-0.6.2/src/lib.rs",
      "vendor/regex-syntax-0.6.29/src/lib.rs",
    ])
      expect(isHeldOut(path), path).toBe(true);
    for (const name of ["python3-dateutil", "golang-github-google-go-cmp-dev", "librust-itertools-dev", "clickhouse"])
      expect(isHeldOut(name), name).toBe(false);
  });

  it("refuses a held-out Debian package named to the eval, and an unpinned version of its own", () => {
    expect(() => parseSpec("python3-werkzeug@2.2.2-3")).toThrow(/held out/);
    expect(() => parseSpec("librust-petgraph-dev@0.6.2-1")).toThrow(/held out/);
    expect(() => parseSpec("python3-dateutil@2.8.1-6")).toThrow(/only 2\.8\.2-2/);
    expect(parseSpec("python3-dateutil@2.8.2-2")).toEqual({ name: "python3-dateutil", version: "2.8.2-2" });
  });
});
