/**
 * The data files a built package ships beside its scripts (the grammars, the translation table):
 * scripts/build-cli.ts copies them into `client/dist` and defines SEXTANT_ASSETS as their folder
 * relative to the built script, whose `import.meta.url` every module of a bundle shares. Run from
 * the source, nothing is defined and callers read the checkout's own copies instead, so that an
 * installed package needs neither the checkout's layout nor the packages the files came from.
 */
declare const SEXTANT_ASSETS: string | undefined;

/** The URL of a shipped data file, or undefined when running from the source. */
export function shippedAsset(path: string): URL | undefined {
  return typeof SEXTANT_ASSETS === "string" ? new URL(SEXTANT_ASSETS + path, import.meta.url) : undefined;
}
