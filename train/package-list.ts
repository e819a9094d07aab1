import { readFileSync } from "node:fs";
import { z } from "zod";

export const LANGUAGE_GROUPS = ["javascript", "python", "go", "rust"] as const;
/** The language a package is mined for; an npm package's files may be JavaScript, TypeScript or TSX. */
export type LanguageGroup = (typeof LANGUAGE_GROUPS)[number];

const NpmEntry = z.object({ name: z.string(), version: z.string(), integrity: z.string().startsWith("sha512-") });
const DebianEntry = z.object({
  name: z.string(),
  version: z.string(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  language: z.enum(["python", "go", "rust"]),
  roots: z.array(z.string()).min(1),
});

export const PackageList = z.object({ npm: z.array(NpmEntry), debian: z.array(DebianEntry) });
export type PackageList = z.infer<typeof PackageList>;
export type NpmEntry = z.infer<typeof NpmEntry>;
export type DebianEntry = z.infer<typeof DebianEntry>;

/** Where each language's source lives inside its Debian packages. */
export const DEBIAN_ROOTS = {
  python: ["usr/lib/python3/dist-packages/"],
  go: ["usr/share/gocode/src/"],
  rust: ["usr/share/cargo/registry/"],
} as const satisfies Record<DebianEntry["language"], readonly string[]>;

export const PACKAGES_JSON = new URL("./packages.json", import.meta.url);

/** The committed, pinned list the pipeline trains from (`train/select.ts` wrote it). */
export function loadPackageList(file: URL | string = PACKAGES_JSON): PackageList {
  return PackageList.parse(JSON.parse(readFileSync(file, "utf8")));
}
