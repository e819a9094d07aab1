/**
 * The codebases the eval is built from, pinned so that a run can be repeated. Each names the one
 * source tree to index: a package often ships the same code twice (ramda's `src/` and `es/`, rxjs's
 * `src/` and four builds under `dist/`), and two copies would make every query ambiguous.
 */
export interface EvalPackage {
  name: string;
  version: string;
  /** Directories inside the package, with a trailing slash, holding its source; "" is the whole package. */
  roots: readonly string[];
  /** Path prefixes left out: other builds of the same code, bundles. */
  exclude: readonly string[];
}

export const EVAL_PACKAGES: readonly EvalPackage[] = [
  // One function per file, each with a JSDoc description; CommonJS, `var f = _curry2(function f …)`.
  { name: "ramda", version: "0.32.0", roots: ["src/"], exclude: [] },
  // TypeScript: operators, classes with documented methods, overloads.
  { name: "rxjs", version: "7.8.2", roots: ["src/"], exclude: [] },
  // Babel-built CommonJS at the top level and `internal/`; `dist/` bundles the same code.
  { name: "async", version: "3.2.6", roots: [""], exclude: ["dist/"] },
];

/**
 * `../shared/HELD-OUT.md`'s npm list, as a package name or as a folder anywhere in a path (a
 * vendored copy): independent checks of the search use these packages, so no eval, fixture or
 * tuning may see them.
 */
const HELD_OUT =
  /(^|\/)(lodash|lodash-es|lodash\.[^/]+|@types\/lodash[^/]*|underscore|date-fns|date-fns-[^/]+|@date-fns\/[^/]+|@tiptap\/[^/]+|prosemirror-[^/]+|ramda|@types\/ramda|rambda|rxjs|async|neo-async|es-toolkit|remeda|radash)(\/|$)/;

export function isHeldOut(nameOrPath: string): boolean {
  return HELD_OUT.test(nameOrPath);
}

/** The search eval may run on a package: never a held-out one, but for its own three (ramda, rxjs, async). */
export function mayEvaluate(name: string): boolean {
  return EVAL_PACKAGES.some((p) => p.name === name) || !isHeldOut(name);
}

/** Builds, bundles and vendored code left out when a package without a pinned layout is evaluated. */
const BUILD_DIRS = ["dist/", "es/", "esm/", "cjs/", "umd/", "bundles/", "build/", "min/", "browser/", "vendor/"];

/**
 * The layout of a package given only by name and version (`--packages`): its `src/` if it has
 * one, else its `lib/`, else everything but the usual build directories.
 */
export function guessLayout(paths: readonly string[]): Pick<EvalPackage, "roots" | "exclude"> {
  const isSource = (p: string) => /\.(m|c)?(j|t)sx?$/.test(p) && !/\.d\.(m|c)?ts$/.test(p);
  for (const root of ["src/", "lib/"])
    if (paths.some((p) => p.startsWith(root) && isSource(p))) {
      return { roots: [root], exclude: [] };
    }
  return { roots: [""], exclude: BUILD_DIRS };
}

/** `name@version`, scoped names included (`@scope/name@1.2.3`). */
export function parseSpec(spec: string): { name: string; version: string } {
  const at = spec.lastIndexOf("@");
  if (at <= 0) throw new Error(`"${spec}" is not name@version: pin an exact version.`);
  const version = spec.slice(at + 1);
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(version))
    throw new Error(`"${spec}": the version must be exact (x.y.z), so that the run can be repeated.`);
  return { name: spec.slice(0, at), version };
}
