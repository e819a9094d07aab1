import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * A deterministic source tree that reads like code, for the benchmarks that chunk and embed: the
 * scan benchmarks' one-line constants make one small chunk per file, which says nothing about how
 * fast real files are chunked, secret-scanned and embedded. These files have imports, interfaces,
 * classes, functions with doc comments and bodies built from a domain vocabulary, so tree-sitter
 * finds definitions and the embedder sees identifiers and prose.
 */
export interface CodeTree {
  root: string;
  /** Workspace-relative paths, in generation order. */
  files: string[];
  /** For each file, the name of one function it defines: a query with a known answer. */
  functions: string[];
}

const NOUNS = (
  "account invoice ledger payment customer order cart session token user profile report metric " +
  "cache queue worker job schedule retry policy route request response header cookie tenant " +
  "workspace project branch commit diff patch file folder chunk index vector embedding query " +
  "result score ranking shard replica lease lock snapshot manifest segment bucket object blob " +
  "event stream message topic channel subscriber webhook endpoint client server socket frame " +
  "parser lexer token grammar node tree graph edge path cursor buffer window layout widget " +
  "theme color font image thumbnail upload download archive backup restore migration schema " +
  "table column record field value label tag filter sort page limit offset price discount tax " +
  "currency address country region zone cluster deployment release version feature flag"
).split(" ");
const VERBS = (
  "parse build load save fetch send render resolve validate normalize merge split apply compute " +
  "collect flush reset refresh sync reconcile schedule dispatch publish subscribe encode decode " +
  "compress expand format register remove update create delete find list count ensure prepare"
).split(" ");
const ADJECTIVES = (
  "pending active stale cached remote local primary secondary default custom partial complete " +
  "visible hidden archived current previous next initial final shared private"
).split(" ");
const PHRASES = [
  "keeps the order stable so that callers can rely on it",
  "is retried by the caller, so it must be idempotent",
  "runs once per request and stays cheap",
  "returns early when there is nothing to do",
  "never throws on malformed input; it reports what it skipped",
  "mirrors what the server expects, field for field",
  "is bounded so one tenant cannot starve the others",
  "must stay in sync with the migration that created the table",
];

/** mulberry32: small, fast and good enough to make the same tree from the same seed. */
export function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(list: readonly T[]) => list[int(list.length)]!;
  return { next, int, pick };
}
type Rng = ReturnType<typeof rng>;

const cap = (w: string) => w[0]!.toUpperCase() + w.slice(1);
const camel = (words: string[]) => words[0]! + words.slice(1).map(cap).join("");
const pascal = (words: string[]) => words.map(cap).join("");
const snake = (words: string[]) => words.join("_");

/** What one generated file is about: a few nouns its names and comments share, as in real modules. */
interface Theme {
  nouns: string[];
  r: Rng;
}

const word = (t: Theme) => (t.r.next() < 0.7 ? t.r.pick(t.nouns) : t.r.pick(NOUNS));
const third = (verb: string) => (/(s|sh|ch)$/.test(verb) ? `${verb}es` : `${verb}s`);
const sentence = (t: Theme, verb: string, noun: string) =>
  `${cap(third(verb))} the ${t.r.pick(ADJECTIVES)} ${noun} ${t.r.pick(["for", "from", "into", "against"])} the ${word(t)} ${word(t)}; it ${t.r.pick(PHRASES)}.`;

function tsStatement(t: Theme, indent: string): string {
  const a = camel([word(t), cap(word(t))]);
  const b = camel([t.r.pick(ADJECTIVES), cap(word(t))]);
  switch (t.r.int(8)) {
    case 0:
      return `${indent}const ${a} = ${camel([t.r.pick(VERBS), cap(word(t))])}(${b}, options);`;
    case 1:
      return `${indent}if (!${a}) return undefined;`;
    case 2:
      return `${indent}for (const ${word(t)} of ${b}) {\n${indent}  ${a}.push(${camel([t.r.pick(VERBS), cap(word(t))])}(${word(t)}));\n${indent}}`;
    case 3:
      return `${indent}// ${sentence(t, t.r.pick(VERBS), word(t))}`;
    case 4:
      return `${indent}this.${a} = await this.client.${camel([t.r.pick(VERBS), cap(word(t))])}({ ${b}, limit: ${t.r.int(500) + 10} });`;
    case 5:
      return `${indent}if (${a}.length > ${t.r.int(100) + 1}) {\n${indent}  throw new Error(\`${t.r.pick(ADJECTIVES)} ${word(t)} \${${a}.length} exceeds the limit\`);\n${indent}}`;
    case 6:
      return `${indent}const ${a} = new Map<string, ${pascal([word(t), "Entry"])}>();`;
    default:
      return `${indent}${a}.set(${b}.id, { ...${b}, updatedAt: Date.now() });`;
  }
}

function pyStatement(t: Theme, indent: string): string {
  const a = snake([word(t), word(t)]);
  const b = snake([t.r.pick(ADJECTIVES), word(t)]);
  switch (t.r.int(7)) {
    case 0:
      return `${indent}${a} = ${snake([t.r.pick(VERBS), word(t)])}(${b}, options)`;
    case 1:
      return `${indent}if not ${a}:\n${indent}    return None`;
    case 2:
      return `${indent}for ${word(t)} in ${b}:\n${indent}    ${a}.append(${snake([t.r.pick(VERBS), word(t)])}(${word(t)}))`;
    case 3:
      return `${indent}# ${sentence(t, t.r.pick(VERBS), word(t))}`;
    case 4:
      return `${indent}self.${a} = self.client.${snake([t.r.pick(VERBS), word(t)])}(${b}, limit=${t.r.int(500) + 10})`;
    case 5:
      return `${indent}if len(${a}) > ${t.r.int(100) + 1}:\n${indent}    raise ValueError(f"${t.r.pick(ADJECTIVES)} ${word(t)} {len(${a})} exceeds the limit")`;
    default:
      return `${indent}${a}[${b}.id] = ${b}`;
  }
}

const body = (t: Theme, indent: string, make: (t: Theme, i: string) => string) =>
  Array.from({ length: 1 + t.r.int(7) }, () => make(t, indent)).join("\n");

function typescriptFile(t: Theme, imports: string[]): { text: string; fn: string } {
  const [n1, n2] = t.nouns;
  const parts = [`/**\n * ${sentence(t, t.r.pick(VERBS), n1!)}\n */`];
  parts.push(
    imports.map((from, i) => `import { ${camel([t.r.pick(VERBS), cap(word(t))])}${i} } from "${from}";`).join("\n"),
  );
  const entry = pascal([n1!, n2!, "Entry"]);
  parts.push(
    `export interface ${entry} {\n  id: string;\n  ${camel([word(t), "Count"])}: number;\n  ${camel([t.r.pick(ADJECTIVES), cap(word(t))])}?: string;\n  updatedAt: number;\n}`,
  );
  let fn = "";
  const definitions = 1 + t.r.int(6);
  for (let d = 0; d < definitions; d++) {
    const verb = t.r.pick(VERBS);
    const name = camel([verb, cap(n1!), cap(word(t))]);
    fn ||= name;
    if (t.r.next() < 0.25) {
      const methods = Array.from({ length: 2 + t.r.int(3) }, () => {
        const m = camel([t.r.pick(VERBS), cap(word(t))]);
        return `  /** ${sentence(t, t.r.pick(VERBS), word(t))} */\n  async ${m}(${camel([word(t), "Id"])}: string): Promise<${entry} | undefined> {\n${body(t, "    ", tsStatement)}\n    return this.${camel([word(t), "Cache"])}.get(${camel([word(t), "Id"])});\n  }`;
      }).join("\n\n");
      parts.push(
        `/** ${sentence(t, verb, n1!)} */\nexport class ${pascal([n1!, word(t), "Store"])} {\n  private readonly ${camel([word(t), "Cache"])} = new Map<string, ${entry}>();\n\n  constructor(private readonly client: ${pascal([word(t), "Client"])}) {}\n\n${methods}\n}`,
      );
    } else {
      parts.push(
        `/** ${sentence(t, verb, n1!)} */\nexport ${t.r.next() < 0.5 ? "async " : ""}function ${name}(${camel([t.r.pick(ADJECTIVES), cap(n2!)])}: ${entry}[], options: { limit?: number } = {}): ${entry}[] {\n${body(t, "  ", tsStatement)}\n  return ${camel([t.r.pick(ADJECTIVES), cap(n2!)])}.slice(0, options.limit ?? ${t.r.int(90) + 10});\n}`,
      );
    }
  }
  return { text: parts.join("\n\n") + "\n", fn };
}

function pythonFile(t: Theme, imports: string[]): { text: string; fn: string } {
  const [n1, n2] = t.nouns;
  const parts = [`"""${sentence(t, t.r.pick(VERBS), n1!)}"""`];
  parts.push(
    [
      "from __future__ import annotations",
      ...imports.map((from, i) => `from ${from} import ${snake([t.r.pick(VERBS), word(t)])}_${i}`),
    ].join("\n"),
  );
  let fn = "";
  const definitions = 1 + t.r.int(6);
  for (let d = 0; d < definitions; d++) {
    const verb = t.r.pick(VERBS);
    const name = snake([verb, n1!, word(t)]);
    fn ||= name;
    if (t.r.next() < 0.25) {
      const methods = Array.from({ length: 2 + t.r.int(3) }, () => {
        const m = snake([t.r.pick(VERBS), word(t)]);
        return `    def ${m}(self, ${snake([word(t), "id"])}: str):\n        """${sentence(t, t.r.pick(VERBS), word(t))}"""\n${body(t, "        ", pyStatement)}\n        return self.${snake([word(t), "cache"])}.get(${snake([word(t), "id"])})`;
      }).join("\n\n");
      parts.push(
        `class ${pascal([n1!, word(t), "Store"])}:\n    """${sentence(t, verb, n1!)}"""\n\n    def __init__(self, client):\n        self.client = client\n\n${methods}`,
      );
    } else {
      parts.push(
        `def ${name}(${snake([t.r.pick(ADJECTIVES), n2!])}, options=None):\n    """${sentence(t, verb, n1!)}"""\n${body(t, "    ", pyStatement)}\n    return ${snake([t.r.pick(ADJECTIVES), n2!])}[: ${t.r.int(90) + 10}]`,
      );
    }
  }
  return { text: parts.join("\n\n\n") + "\n", fn };
}

/** Three in four files TypeScript, one in four Python, 50 files a directory, in nested packages. */
function layout(i: number): string {
  const python = i % 4 === 3;
  const dir = Math.floor(i / 50);
  const pkg = NOUNS[dir % NOUNS.length]!;
  const sub = NOUNS[(Math.floor(dir / NOUNS.length) * 7 + 3) % NOUNS.length]!;
  const name = `${NOUNS[(i * 31) % NOUNS.length]}-${NOUNS[(i * 17 + 5) % NOUNS.length]}-${i}`;
  return python ? `services/${pkg}/${sub}/${name.replace(/-/g, "_")}.py` : `packages/${pkg}/src/${sub}/${name}.ts`;
}

/**
 * `count` files, about 3 KB on average (1 to 12 KB), the same for the same `seed`. Reused when the
 * directory already holds this tree, since writing 10,000 files is not what is being measured.
 */
export function generateCodeTree(root: string, count: number, seed = 1): CodeTree {
  const files = Array.from({ length: count }, (_, i) => layout(i));
  const functions: string[] = [];
  const marker = join(root, ".generated");
  const stamp = `code v1 ${count} ${seed}`;
  const reuse = existsSync(marker) && readFileSync(marker, "utf8") === stamp;
  const made = new Set<string>();
  for (const [i, path] of files.entries()) {
    const r = rng(seed * 1_000_003 + i);
    const theme: Theme = { nouns: [r.pick(NOUNS), r.pick(NOUNS), r.pick(NOUNS)], r };
    const imports = Array.from({ length: 1 + r.int(4) }, () => {
      const other = files[r.int(count)] ?? path;
      return path.endsWith(".py")
        ? other.replace(/\.(py|ts)$/, "").replace(/[/-]/g, (c) => (c === "/" ? "." : "_"))
        : `../${other
            .split("/")
            .slice(-2)
            .join("/")
            .replace(/\.(py|ts)$/, "")}`;
    });
    const { text, fn } = path.endsWith(".py") ? pythonFile(theme, imports) : typescriptFile(theme, imports);
    functions.push(fn);
    if (reuse) continue;
    const dir = join(root, path, "..");
    if (!made.has(dir)) {
      mkdirSync(dir, { recursive: true });
      made.add(dir);
    }
    writeFileSync(join(root, path), text);
  }
  if (!reuse) {
    writeFileSync(join(root, ".gitignore"), ".generated\n");
    writeFileSync(marker, stamp);
  }
  return { root, files, functions };
}
