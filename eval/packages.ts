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

/** A Debian binary package that carries a library's source, pinned by version and by the .deb's SHA-256. */
export interface DebianPackage extends Pick<EvalPackage, "roots" | "exclude"> {
  name: string;
  /** The Debian version, exactly as `apt-get download name=version` takes it. */
  version: string;
  sha256: string;
}

/** One corpus for each of Python, Go and Rust, from Debian 12 (bookworm). */
export const DEBIAN_PACKAGES: readonly DebianPackage[] = [
  // Date parsing, relative deltas, recurrence rules and time zones; reST docstrings.
  {
    name: "python3-dateutil",
    version: "2.8.2-2",
    sha256: "59d696282ffeaf54395452e012715410dc414c6baaa54d4cdae56ac7c217eb31",
    roots: ["usr/lib/python3/dist-packages/dateutil/"],
    exclude: [],
  },
  // Deep comparison of Go values, its options and its diff reporter; the test-only packages left out.
  {
    name: "golang-github-google-go-cmp-dev",
    version: "0.5.9-1",
    sha256: "b68bd919daa7c1bdf02abfb68894e29e532f19b03b68c8615f50626c48f553b6",
    roots: ["usr/share/gocode/src/github.com/google/go-cmp/cmp/"],
    exclude: [
      "usr/share/gocode/src/github.com/google/go-cmp/cmp/internal/teststructs/",
      "usr/share/gocode/src/github.com/google/go-cmp/cmp/internal/testprotos/",
    ],
  },
  // Iterator adaptors; the crate's `src/` only (its tests, benches and examples are in the package too). The
  // package is built per architecture: the SHA-256 is amd64's .deb.
  {
    name: "librust-itertools-dev",
    version: "0.10.3-1",
    sha256: "3e13fc328508275c2c84270133f41a300ffb58b9b77001b89373ba7f7ab57fde",
    roots: ["usr/share/cargo/registry/itertools-0.10.3/src/"],
    exclude: [],
  },
];

/**
 * `../shared/HELD-OUT.md`'s npm list, as a package name or as a folder anywhere in a path (a
 * vendored copy): independent checks of the search use these packages, so no eval, fixture or
 * tuning may see them.
 */
const HELD_OUT =
  /(^|\/)(lodash|lodash-es|lodash\.[^/]+|@types\/lodash[^/]*|underscore|date-fns|date-fns-[^/]+|@date-fns\/[^/]+|@tiptap\/[^/]+|prosemirror-[^/]+|ramda|@types\/ramda|rambda|rxjs|async|neo-async|es-toolkit|remeda|radash)(\/|$)/;

/**
 * HELD-OUT.md's Debian list: the packages by name (with a Rust crate's feature and versioned
 * packages, `librust-petgraph+serde-dev`), and their code as a folder in a path, where Debian
 * installs it or a copy of it: werkzeug, flask, golang.org/x/text and petgraph anywhere, click as a
 * Python package or a vendored copy (`pip/_vendor/click/`), regex-syntax as a crate (`regex-syntax-0.6.29/`).
 */
const HELD_OUT_DEBIAN = new RegExp(
  [
    /^(python3-(werkzeug|flask|click)|golang-golang-x-text-dev|librust-(petgraph|regex-syntax)([+-][^/]*)?-dev)$/,
    /(^|\/)(werkzeug|flask|golang\.org\/x\/text|petgraph(-\d[^/]*)?|regex-syntax-\d[^/]*)(\/|$)/,
    /(^|\/)((site|dist)-packages|_?vendor(ed)?)\/click(\/|$)/,
  ]
    .map((r) => r.source)
    .join("|"),
);

export function isHeldOut(nameOrPath: string): boolean {
  return HELD_OUT.test(nameOrPath) || HELD_OUT_DEBIAN.test(nameOrPath);
}

/** The search eval may run on a package: never a held-out one, but for its own npm three (ramda, rxjs, async). */
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

/**
 * `name@version`, scoped names included (`@scope/name@1.2.3`); a held-out name is refused before
 * its version is looked at.
 */
export function parseSpec(spec: string): { name: string; version: string } {
  const at = spec.lastIndexOf("@");
  if (at <= 0) throw new Error(`"${spec}" is not name@version: pin an exact version.`);
  const name = spec.slice(0, at);
  if (!mayEvaluate(name)) throw new Error(`${name} is held out for independent checks and never evaluated here.`);
  const version = spec.slice(at + 1);
  const debian = DEBIAN_PACKAGES.find((p) => p.name === name);
  if (debian) {
    if (debian.version !== version)
      throw new Error(`${name}: only ${debian.version}, pinned with its SHA-256 in eval/packages.ts, is evaluated.`);
    return { name, version };
  }
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(version))
    throw new Error(`"${spec}": the version must be exact (x.y.z), so that the run can be repeated.`);
  return { name, version };
}
