/**
 * The model card written beside the weights: where the data came from and how much of it, the
 * package list with its integrity hashes, the training settings, and the dev eval's figures for
 * these very weights, so that a rerun can be checked against it.
 */
import { formatEdgeScores, type DevScores, type EdgeScores } from "./dev-eval.js";
import type { TrainSettings } from "./trainer.js";
import type { TranslationSettings } from "./translation.js";

export interface CardInput {
  date: string;
  command: string;
  settings: TrainSettings;
  weightsSha256: string;
  vocabSha256: string;
  weightsBytes: number;
  vocabSize: number;
  pairsUsed: number;
  trainSeconds: number;
  totalSeconds: number;
  /** `data-stats.json` as the data step wrote it. */
  dataStats: unknown;
  packages: {
    npm: { name: string; version: string; integrity: string }[];
    debian: { name: string; version: string; sha256: string }[];
  };
  dev: readonly DevScores[];
  finalLoss: number;
  translation: {
    settings: TranslationSettings;
    words: number;
    entries: number;
    tableBytes: number;
    tableSha256: string;
    termsSha256: string;
    seconds: number;
    /** The dev eval ranked as the edge ranks it, with and without the translation channel. */
    edge: readonly EdgeScores[];
  };
}

const pct = (x: number) => x.toFixed(3);

export function modelCard(input: CardInput): string {
  const s = input.settings;
  const weights = [...(input.dev[0]?.fused.keys() ?? [])];
  const devRows = input.dev.map(
    (r) =>
      `| ${r.label} | ${r.queries} | ${pct(r.bm25)} | ${pct(r.model)} (${(r.model / r.bm25).toFixed(2)}x) | ` +
      weights.map((w) => `${pct(r.fused.get(w)!)} (${(r.fused.get(w)! / r.bm25).toFixed(2)}x)`).join(" | ") +
      " |",
  );
  return `# ${s.name}

The learned built-in embedder: a static embedding model for code search (questions in English, code in
JavaScript, TypeScript, Python, Go and Rust). One table of ${input.vocabSize.toLocaleString("en")} term vectors of ${s.dims} dimensions,
shared by questions and code, and a learned weight per term for each side; a text's vector is the
weighted sum of its terms' vectors, normalised. Terms are identifiers split into words, lower-cased
and lightly stemmed (\`ModelTokenizer\`, \`protocol/embedder/static.ts\`), the same code on both sides.
Code has a third learned weight per term, added for the terms of the names it defines
(\`definedNames\`, \`protocol/embedder/names.ts\`), trained with the rest.

Written by \`${input.command}\` on ${input.date}, in ${Math.round(input.totalSeconds / 60)} minutes
(training ${Math.round(input.trainSeconds / 60)} minutes, on one thread).

## Files

| file | bytes | SHA-256 |
|---|---|---|
| weights.bin | ${input.weightsBytes} | ${input.weightsSha256} |
| vocab.txt | | ${input.vocabSha256} |
| translation.bin | ${input.translation.tableBytes} | ${input.translation.tableSha256} |
| translation-terms.txt | | ${input.translation.termsSha256} |

## Data

Pairs of (a doc comment's first sentence, the documented definition with every comment removed),
mined from the packages listed below exactly as \`npm run eval\` draws its questions. The packages of
\`../shared/HELD-OUT.md\` and the dev eval's own (ramda, rxjs, async, python3-dateutil,
golang-github-google-go-cmp-dev, librust-itertools-dev) are dropped by name, and any file sharing
their doc sentences or code is dropped by content. ${input.pairsUsed.toLocaleString("en")} pairs were trained on.

\`\`\`json
${JSON.stringify(input.dataStats, null, 2)}
\`\`\`

## Training

In-batch contrastive loss (InfoNCE, question to code and code to question), batches of ${s.batchSize}
drawn as groups of up to ${s.packageGroup} pairs of one package (so each question meets code of its own
package as negatives), ${s.epochs} epochs, Adam at ${s.learningRate}, temperature ${s.temperature}, seed ${s.seed},
vocabulary of the ${s.vocabSize.toLocaleString("en")} terms found in the most texts (at least ${s.minCount}). Term weights
start at the term's inverse document frequency. The table is stored as int8 with one scale per row.
Final batch loss ${input.finalLoss.toFixed(3)}.

## Dev eval (offline, these weights)

MRR@10 on the dev eval's codebases, the same questions and comment-free chunks as \`npm run eval\`,
against BM25 over the same chunks with paths and identifiers split. "fused" adds the model's cosine
to that BM25 scaled to its best (\`fuseScores\`, \`protocol/fusion.ts\`) at the lexical weight shown.
\`npm run eval\` (through the edge) is the figure of record.

| codebase | queries | BM25 | model | ${weights.map((w) => `fused w=${w}`).join(" | ")} |
|---|---|---|---|${weights.map(() => "---|").join("")}
${devRows.join("\n")}

## The translation table (\`translation.bin\`)

The question side's translation model (\`protocol/embedder/translation.ts\`): IBM Model 1,
P(question word | code term), trained by ${input.translation.settings.iterations} rounds of expectation-maximisation on the same pairs,
both sides tokenized as the lexical channel tokenizes them, terms in at least ${input.translation.settings.minCount} texts. Entries
below ${input.translation.settings.keepAbove} are dropped and each word keeps its ${"`MAX_ALTERNATIVES`"} heaviest: ${input.translation.words.toLocaleString("en")} words,
${input.translation.entries.toLocaleString("en")} entries, trained in ${Math.round(input.translation.seconds)} seconds.

The dev eval ranked as the edge ranks it (\`evaluateEdge\`, \`train/dev-eval.ts\`): the Workspace
object's own index over keyed terms, its BM25 ("lexical"), the translation channel alone, the vector
and lexical channels fused as without the table, all three fused (\`fuseThree\`), and all three with each chunk's
cosine the best of its own vector's and its definition pieces' (\`definitionPieces\`). These are the figures of the
training run, ranked as the edge ranked when it ran; \`npm run eval:dev\` prints the same table for the
edge's ranking at any later commit.

\`\`\`
${formatEdgeScores(input.translation.edge)}
\`\`\`

## Packages

${input.packages.npm.length} npm packages (sha512 integrity from the registry) and ${input.packages.debian.length} Debian 12 packages
(SHA-256 of the .deb), as pinned in \`train/packages.json\`:

<details><summary>The list</summary>

${input.packages.npm.map((p) => `- ${p.name}@${p.version} ${p.integrity}`).join("\n")}
${input.packages.debian.map((p) => `- ${p.name}=${p.version} sha256:${p.sha256}`).join("\n")}

</details>
`;
}
