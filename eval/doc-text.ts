/**
 * Turns a `/** … *\/` comment into the question a person would type: the description's first
 * sentence (two when the first is short), in plain words. Tags, examples, markup and links go, since
 * nobody searches with `{@link …}` or an `@example` block.
 */

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'", "#39": "'", nbsp: " " };
const sentences = new Intl.Segmenter("en", { granularity: "sentence" });

/** The description part of a doc comment: before the first block tag, or an explicit `@description`. */
export function description(doc: string): string {
  const lines = doc
    .replace(/^\/\*\*+/, "")
    .replace(/\*+\/$/, "")
    .split(/\r?\n/)
    .map((line) => line.replace(/^\s*\*( ?)/, ""));
  const tagged = /^\s*@(description|summary|desc)\b\s*(.*)$/;
  for (let i = 0; i < lines.length; i++) {
    const m = lines[i]!.match(tagged);
    if (!m) continue;
    const rest = [m[2]!];
    for (let j = i + 1; j < lines.length && !/^\s*@\w/.test(lines[j]!); j++) rest.push(lines[j]!);
    return rest.join("\n");
  }
  const end = lines.findIndex((line) => /^\s*@\w/.test(line));
  return (end < 0 ? lines : lines.slice(0, end)).join("\n");
}

/** Markdown, HTML and JSDoc inline markup reduced to the words they show. */
export function plainText(markup: string): string {
  return (
    markup
      // Code is an example, not a description.
      .replace(/```[\s\S]*?(```|$)/g, "\n")
      // Indented code, as JSDoc writes examples (three spaces past the `* `, or a tab).
      .replace(/^(?: {3,}|\t).*$/gm, "")
      .replace(/^\s*#{1,6}\s.*$/gm, "\n")
      .replace(/^\s*(examples?|usage|options):?\s*$/gim, "\n")
      .replace(/\[([^\]]+)\]\{@\w+[^}]*\}/g, "$1")
      .replace(/\{@\w+\s+([^}|\s]+)(?:[\s|]+([^}]*))?\}/g, (_, target: string, label?: string) =>
        label?.trim() ? label : target,
      )
      .replace(/!\[[^\]]*\]\([^)]*\)/g, "")
      .replace(/\[([^\]]+)\]\([^)]*\)/g, "$1")
      .replace(/\[([^\]]+)\]\[[^\]]*\]/g, "$1")
      .replace(/<[^>]+>/g, " ")
      .replace(/&(#39|\w+);/g, (entity, name: string) => ENTITIES[name] ?? entity)
      .replace(/`+/g, "")
      .replace(/(\*\*|__)(.+?)\1/g, "$2")
      .replace(/(^|[^\w*])[_*]([^_*\s][^_*]*?)[_*](?=[^\w*]|$)/g, "$1$2")
      .replace(/\s+/g, " ")
      .trim()
  );
}

/**
 * Markdown links and link reference definitions, and the bare `[Name]` links that rustdoc and Go
 * doc comments write, reduced to the words they show.
 */
export function linkText(markdown: string): string {
  return markdown
    .replace(/^\s*\[[^\]]+\]:\s*\S.*$/gm, "")
    .replace(/!\[[^\]]*\]\([^)]*\)/g, "")
    .replace(/\[([^\]]+)\](\([^)]*\)|\[[^\]]*\])?/g, "$1");
}

export const wordCount = (text: string) => text.split(/\s+/).filter((w) => /[\p{L}\p{N}]/u.test(w)).length;

/** The query for a doc comment, or undefined when its description is under `minWords` words. */
export function queryFromDoc(doc: string, minWords = 4): string | undefined {
  return queryFromDescription(description(doc), minWords);
}

/**
 * The question a description in Markdown-like text gives: its first sentence, two when the first
 * is under eight words; undefined when that is under `minWords` words. Every language's doc
 * comments end here once their own syntax is gone, so the questions are drawn alike.
 */
export function queryFromDescription(text: string, minWords = 4): string | undefined {
  // Paragraphs first: a sentence never runs across a blank line.
  const paragraphs = text
    .split(/\n\s*\n/)
    .map(plainText)
    .filter(Boolean);
  const first = [...sentences.segment(paragraphs.join("\n\n"))].map((s) => s.segment.trim()).filter(Boolean);
  let query = first[0] ?? "";
  if (wordCount(query) < 8 && first[1]) query = `${query} ${first[1]}`;
  return wordCount(query) >= minWords ? query : undefined;
}
