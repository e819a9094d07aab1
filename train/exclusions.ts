import { DEBIAN_PACKAGES, EVAL_PACKAGES, isHeldOut } from "../eval/packages.js";

/**
 * The dev eval's Debian sources as a folder anywhere in a path, where Debian installs them or where
 * another package vendors a copy: `dateutil/`, `github.com/google/go-cmp/`, an `itertools-0.10.3/`
 * crate. The npm three (ramda, rxjs, async) are already folders in `isHeldOut`'s pattern.
 */
const DEV_EVAL_SOURCES = /(^|\/)(dateutil|github\.com\/google\/go-cmp|itertools-\d[^/]*)(\/|$)/;

const DEV_EVAL_NAMES = new Set([...EVAL_PACKAGES, ...DEBIAN_PACKAGES].map((p) => p.name));

/**
 * Whether a package name or a file path inside a package may never be trained on: HELD-OUT.md's
 * packages and their code anywhere, and the dev eval's packages and their code anywhere, since a
 * model trained on the codebases it is scored on would report a score it does not have.
 */
export function isExcludedFromTraining(nameOrPath: string): boolean {
  return (
    isHeldOut(nameOrPath) ||
    DEV_EVAL_NAMES.has(nameOrPath) ||
    DEV_EVAL_SOURCES.test(nameOrPath) ||
    RELATED_NAMES.test(nameOrPath)
  );
}

/**
 * Packages named after a reserved one (its extensions, plugins, ports and wrappers: python3-flask-restful,
 * python3-click-log, underscore.string, rxjs-compat): their docs quote and mirror the original's, which the
 * content check catches only where a sentence is word for word the same. Left out by name, to be sure.
 */
const RELATED_NAMES =
  /^(python3-(werkzeug|flask|click|dateutil)([-.][\w.-]*)?|golang-[\w.-]*(x-text|go-cmp)[\w.-]*|librust-(petgraph|regex-syntax|itertools)[\w+.-]*|(@[\w.-]+\/)?(lodash|underscore|date-fns|ramda|rambda|rxjs|remeda|radash|es-toolkit|prosemirror|tiptap|neo-async)([-.][\w.-]*)?)$/;

/**
 * The reserved packages fetched only to fingerprint their text, so that copies of them under other
 * names can be found and dropped; their text is never written anywhere. `@types/lodash` is here
 * because vendored type definitions are the likeliest copy.
 */
export const FINGERPRINT_NPM = [
  "lodash",
  "@types/lodash",
  "underscore",
  "date-fns",
  "ramda",
  "@types/ramda",
  "rxjs",
  "async",
  "remeda",
  "radash",
  "es-toolkit",
  "@tiptap/core",
  "prosemirror-model",
  "prosemirror-state",
  "prosemirror-view",
  "neo-async",
  "rambda",
] as const;

/** The Debian ones, with the folder their source sits in (the whole package: none of it is trainable). */
export const FINGERPRINT_DEBIAN = [
  "python3-werkzeug",
  "python3-click",
  "python3-flask",
  "golang-golang-x-text-dev",
  "librust-petgraph-dev",
  "librust-regex-syntax-dev",
  ...DEBIAN_PACKAGES.map((p) => p.name),
] as const;
