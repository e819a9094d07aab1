/**
 * Terraform files, offline: `.tf`, `.tfvars` and `.hcl` parsed with HashiCorp's HCL parser
 * (@cdktf/hcl2json, which reports syntax errors as file:line), and a module as the blocks of its
 * files. hcl-evaluator.ts evaluates their expressions.
 */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { parse } from "@cdktf/hcl2json";

/** A block's body as hcl2json writes it: attributes by name, nested blocks as arrays. */
export type Body = Record<string, any>;

export interface HclFile {
  path: string;
  text: string;
  body: Body;
}

export async function parseHcl(path: string, text: string): Promise<HclFile> {
  return { path, text, body: await parse(path, text) };
}

/** Every file under `dir` whose name ends in one of `extensions`, recursively. */
export function listFiles(dir: string, extensions: string[]): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && extensions.some((ext) => e.name.endsWith(ext)))
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

/** One directory of `.tf` files; `sources` overrides files by name (for checks on altered copies). */
export class TfModule {
  private constructor(
    readonly dir: string,
    readonly files: HclFile[],
    private readonly sources: Record<string, string>,
  ) {}

  static async load(dir: string, sources: Record<string, string> = {}): Promise<TfModule> {
    const onDisk = existsSync(dir) ? readdirSync(dir).filter((name) => name.endsWith(".tf")) : [];
    const names = [...new Set([...onDisk, ...Object.keys(sources).filter((name) => name.endsWith(".tf"))])].sort();
    const files = await Promise.all(
      names.map((name) => parseHcl(join(dir, name), sources[name] ?? readFileSync(join(dir, name), "utf8"))),
    );
    return new TfModule(resolve(dir), files, sources);
  }

  /** A file of the module by absolute path, as `templatefile` reads it. */
  read(path: string): string {
    const rel = path.startsWith(this.dir + "/") ? path.slice(this.dir.length + 1) : undefined;
    return rel !== undefined && rel in this.sources ? this.sources[rel]! : readFileSync(path, "utf8");
  }

  /** Labelled blocks of a type (`variable`, `output`, `module`, `provider`) across files. */
  blocks(type: string): { name: string; body: Body; file: string }[] {
    return this.files.flatMap((f) =>
      Object.entries((f.body[type] ?? {}) as Record<string, Body[]>).flatMap(([name, bodies]) =>
        bodies.map((body) => ({ name, body, file: f.path })),
      ),
    );
  }

  /** Doubly labelled blocks (`resource`, `data`). */
  resources(kind: "resource" | "data"): { type: string; name: string; body: Body; file: string }[] {
    return this.files.flatMap((f) =>
      Object.entries((f.body[kind] ?? {}) as Record<string, Record<string, Body[]>>).flatMap(([type, byName]) =>
        Object.entries(byName).flatMap(([name, bodies]) => bodies.map((body) => ({ type, name, body, file: f.path }))),
      ),
    );
  }

  unlabelled(type: "locals" | "terraform"): { body: Body; file: string }[] {
    return this.files.flatMap((f) => ((f.body[type] ?? []) as Body[]).map((body) => ({ body, file: f.path })));
  }

  block(type: string, name: string): Body | undefined {
    return this.blocks(type).find((b) => b.name === name)?.body;
  }
}

export type Part = { literal: string } | { expression: string };

/** Splits an hcl2json string into literal text and `${…}` sources (escapes `$${` and `%%{` undone). */
export function templateParts(text: string): Part[] {
  const parts: Part[] = [];
  let literal = "";
  let i = 0;
  while (i < text.length) {
    if (text.startsWith("$${", i) || text.startsWith("%%{", i)) {
      literal += text[i + 1] + "{";
      i += 3;
    } else if (text.startsWith("%{", i)) {
      throw new Error(`template directives (%{…}) are not supported offline: ${text.slice(i, i + 40)}`);
    } else if (text.startsWith("${", i)) {
      const end = closingBrace(text, i + 2);
      if (literal) parts.push({ literal });
      literal = "";
      parts.push({
        expression: text
          .slice(i + 2, end)
          .replace(/^~|~$/g, "")
          .trim(),
      });
      i = end + 1;
    } else literal += text[i++];
  }
  if (literal || parts.length === 0) parts.push({ literal });
  return parts;
}

function closingBrace(text: string, from: number): number {
  let depth = 0;
  for (let i = from; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === "\\") i++;
    } else if (c === "{") depth++;
    else if (c === "}" && depth-- === 0) return i;
  }
  throw new Error(`unterminated interpolation: ${text.slice(from - 2, from + 40)}`);
}
