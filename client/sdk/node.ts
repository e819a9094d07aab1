/**
 * `sextant/sdk/node`: what only Node can do for an SDK caller, here so that `sextant/sdk` itself bundles
 * for browsers and Workers. `questionTranslations` reads the translation table shipped in the package
 * the first time a search needs it; the CLI's searches use it too. The built package carries its own
 * copy beside its scripts (`client/dist/model/`); the source reads the checkout's
 * `protocol/embedder/model/`.
 */
import { readFileSync } from "node:fs";
import { parseTranslation, type TranslatedWord, type TranslationTable } from "../../protocol/embedder/translation.js";
import { shippedAsset } from "../assets.js";
import { translationsWith } from "./translations.js";

const MODEL_DIR = shippedAsset("model/") ?? new URL("../../protocol/embedder/model/", import.meta.url);
let table: TranslationTable | null | undefined;

/** The shipped table, or null when the package carries none (a search then ranks without it). */
function shippedTable(): TranslationTable | null {
  if (table !== undefined) return table;
  try {
    table = parseTranslation(
      readFileSync(new URL("translation.bin", MODEL_DIR)),
      readFileSync(new URL("translation-terms.txt", MODEL_DIR), "utf8"),
    );
  } catch {
    table = null;
  }
  return table;
}

/** The question's words with their code-term translations, for `SearchRequest.translations`. */
export function questionTranslations(query: string): TranslatedWord[] | undefined {
  const loaded = shippedTable();
  return loaded ? translationsWith(loaded, query) : undefined;
}
