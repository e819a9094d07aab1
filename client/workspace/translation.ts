/**
 * The question-side translation table (`protocol/embedder/translation.ts`), read from the model's
 * directory the first time a search needs it. The path is the same from the sources and from the
 * bundled CLI (`client/dist`): both sit two directories below the package root.
 */
import { readFileSync } from "node:fs";
import {
  parseTranslation,
  translateQuestion,
  type TranslatedWord,
  type TranslationTable,
} from "../../protocol/embedder/translation.js";

const MODEL_DIR = new URL("../../protocol/embedder/model/", import.meta.url);
let table: TranslationTable | null | undefined;

/** The table, or null when the package carries none (a search then ranks without it). */
function translationTable(): TranslationTable | null {
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
  const loaded = translationTable();
  if (!loaded) return undefined;
  const words = translateQuestion(loaded, query);
  return words.length > 0 ? words : undefined;
}
