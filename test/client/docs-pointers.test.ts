/**
 * Code, configuration and folder READMEs send readers to the docs by page and section: a comment's
 * `(docs/configuration.md, "Embedders")`, an error's or a help line's hint, a folder README's
 * `../docs/agents.md#sandboxes`. Each must name a page that exists and a heading that page has, and
 * none may name a README section the README no longer holds, so moving a section between pages
 * breaks here rather than leaving readers to search.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(".");
/** Where the pointers live: everything but the docs themselves, history, fixtures and builds. */
const SKIP_DIRS = new Set(["node_modules", "docs", "dist", "fixtures", "coverage"]);
const EXTENSIONS = /\.(ts|mts|js|mjs|toml|sh|tf|hcl|md)$/;
/** Tests of the docs checks, whose made-up pages and pointers are their fixtures. */
const EXAMPLES = ["test/client/docs-links.test.ts", "test/client/docs-pointers.test.ts"];

function sources(dir = ROOT): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith(".") || SKIP_DIRS.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...sources(path));
    else if (entry.isFile() && EXTENSIONS.test(entry.name)) found.push(relative(ROOT, path));
  }
  return found.filter((file) => !["README.md", "CHANGELOG.md", ...EXAMPLES].includes(file));
}

/** A Markdown file's headings, outside fenced code blocks. */
function headings(file: string): string[] {
  const text = readFileSync(file, "utf8").replace(/^```[\s\S]*?^```$/gm, "");
  return [...text.matchAll(/^#{1,6} +(.+?) *$/gm)].map((m) => m[1]!);
}

/** The anchor a heading gets on GitHub and in remark-validate-links: lowercased, punctuation dropped, spaces to '-'. */
const slug = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/ /g, "-");

type Pointer = { file: string; page: string; section?: string; anchor?: string; text: string };

/** `docs/page.md, "Section"`, `docs/page.md's "Section"`, `docs/page.md` and Markdown links into docs/. */
function pointers(file: string): Pointer[] {
  const text = readFileSync(file, "utf8");
  const found: Pointer[] = [];
  for (const m of text.matchAll(/\]\(((?:\.\.\/)*docs\/[\w-]+\.md)(?:#([^)\s]+))?\)/g)) {
    const page = relative(ROOT, resolve(ROOT, file, "..", m[1]!));
    found.push({ file, page, anchor: m[2], text: m[0] });
  }
  // A page in prose or in parentheses, not a path a test writes (`"docs/billing.md": …`).
  for (const m of text.matchAll(/(?<=[(\s])(docs\/[\w-]+\.md)(?:(?:, |'s )"([^"]+)")?/g))
    found.push({ file, page: m[1]!, section: m[2], text: m[0] });
  return found;
}

/** README sections named the way comments once did: the word, a comma and a quoted title, or "the README's … section". */
function readmeSections(file: string): { file: string; section: string }[] {
  const text = readFileSync(file, "utf8");
  return [
    ...[...text.matchAll(/README,? "([^"]+)"/g)].map((m) => m[1]!),
    ...[...text.matchAll(/README's ([\w' ]+?) section/g)].map((m) => m[1]!),
  ].map((section) => ({ file, section }));
}

describe("pointers into the docs", () => {
  const files = sources();

  it("finds the code, configuration and folder READMEs it checks", () => {
    for (const file of ["wrangler.toml", "workers/gateway/routes.ts", "sandboxes/README.md"])
      expect(files).toContain(file);
  });

  it("name pages that exist, and headings or anchors those pages have", () => {
    const all = files.flatMap(pointers);
    expect(all.length).toBeGreaterThan(10);
    const broken = all.filter(({ page, section, anchor }) => {
      if (!existsSync(page)) return true;
      const pageHeadings = headings(page);
      if (section !== undefined && !pageHeadings.includes(section)) return true;
      return anchor !== undefined && !pageHeadings.map(slug).includes(anchor);
    });
    expect(broken.map(({ file, text }) => `${file}: ${text}`)).toEqual([]);
  });

  it("name no README section the README does not have", () => {
    const readme = headings("README.md");
    const stale = files.flatMap(readmeSections).filter(({ section }) => !readme.includes(section));
    expect(stale.map(({ file, section }) => `${file}: README section ${section}`)).toEqual([]);
  });
});
