/**
 * The question side of the edge's translation channel, for callers of `workspaces.search`: each word of
 * a question with the code terms it tends to be written as, sent as `SearchRequest.translations`.
 * Runs anywhere the SDK does. The table is the model's `translation.bin` and `translation-terms.txt`
 * (`protocol/embedder/model/`): `sextant/sdk/node` reads the copy shipped in the package; in a browser
 * or a Worker, fetch the two files and `parseTranslation` them once.
 */
import { translateQuestion, type TranslatedWord, type TranslationTable } from "../../protocol/embedder/translation.js";

export { parseTranslation, TranslationError } from "../../protocol/embedder/translation.js";
export type { TranslatedWord, TranslationTable } from "../../protocol/embedder/translation.js";

/** A question's words with their translations in this table, or undefined when it has no words (send none). */
export function translationsWith(table: TranslationTable, query: string): TranslatedWord[] | undefined {
  const words = translateQuestion(table, query);
  return words.length > 0 ? words : undefined;
}
