/**
 * What the edge changes in a request body before it reaches a backend: fill-in-the-middle
 * templates for servers that reject `suffix` (vLLM, SGLang), and OpenAI's `prediction` folded
 * into the prompt for servers that cannot take it, so that their n-gram speculative decoding
 * finds the original text in the prompt.
 */
import type { FimFamily } from "../../protocol/gateway.js";

interface FimTemplate {
  render(prefix: string, suffix: string): string;
  /** Tokens that end a fill; vLLM also stops at the model's EOS, these catch templates that leak. */
  stop: string[];
}

/** Templates from each family's model card / tokenizer configuration. */
export const FIM_TEMPLATES: Record<FimFamily, FimTemplate> = {
  "qwen2.5-coder": {
    render: (p, s) => `<|fim_prefix|>${p}<|fim_suffix|>${s}<|fim_middle|>`,
    stop: ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"],
  },
  "deepseek-coder": {
    render: (p, s) => `<｜fim▁begin｜>${p}<｜fim▁hole｜>${s}<｜fim▁end｜>`,
    stop: ["<｜end▁of▁sentence｜>", "<|EOT|>", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"],
  },
  starcoder2: {
    render: (p, s) => `<fim_prefix>${p}<fim_suffix>${s}<fim_middle>`,
    stop: ["<|endoftext|>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>"],
  },
  codellama: {
    // Code Llama's infilling format: "<PRE> " prefix " <SUF>" suffix " <MID>".
    render: (p, s) => `<PRE> ${p} <SUF>${s} <MID>`,
    stop: ["<EOT>", "</s>"],
  },
  codestral: {
    render: (p, s) => `[SUFFIX]${s}[PREFIX]${p}`,
    stop: ["</s>", "[PREFIX]", "[SUFFIX]"],
  },
};

function mergeStop(given: unknown, extra: string[]): string[] {
  const list =
    typeof given === "string" ? [given] : Array.isArray(given) ? given.filter((s) => typeof s === "string") : [];
  // OpenAI accepts at most 4 stop sequences, vLLM any number; the caller's own come first.
  return [...new Set([...list, ...extra])];
}

/**
 * A `/v1/completions` body for a backend that rejects `suffix`: the prompt becomes the family's
 * FIM prompt and `suffix` is removed. Without a `suffix` the body is left alone (plain completion).
 */
export function renderFim(body: Record<string, unknown>, family: FimFamily): Record<string, unknown> {
  if (typeof body.suffix !== "string") {
    const { suffix: _, ...rest } = body;
    return rest;
  }
  const template = FIM_TEMPLATES[family];
  const prefix = Array.isArray(body.prompt) ? String(body.prompt[0] ?? "") : String(body.prompt ?? "");
  const { suffix, ...rest } = body;
  return { ...rest, prompt: template.render(prefix, suffix as string), stop: mergeStop(body.stop, template.stop) };
}

interface ChatMessage {
  role: string;
  content?: unknown;
  [key: string]: unknown;
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content
      .map((part) => (part && typeof part === "object" && "text" in part ? String(part.text) : ""))
      .join("");
  return "";
}

/** The text of OpenAI's `prediction: {type: "content", content}` (a string or text parts). */
export function predictionText(prediction: unknown): string | undefined {
  if (!prediction || typeof prediction !== "object") return undefined;
  const text = textOf((prediction as { content?: unknown }).content);
  return text.length > 0 ? text : undefined;
}

/**
 * A chat body for a backend that cannot take `prediction`: the field is removed, and unless the
 * last user message already contains the predicted text, the text is appended to that message,
 * where the backend's prompt-lookup (n-gram) speculative decoding can copy from it.
 */
export function foldPrediction(body: Record<string, unknown>): Record<string, unknown> {
  const { prediction, ...rest } = body;
  const text = predictionText(prediction);
  if (text === undefined || !Array.isArray(rest.messages)) return rest;
  const messages = [...(rest.messages as ChatMessage[])];
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!;
    if (message.role !== "user") continue;
    const current = textOf(message.content);
    if (current.includes(text)) return { ...rest, messages };
    const appended = `${current}\n\nThe original text, which the answer mostly repeats:\n\`\`\`\n${text}\n\`\`\``;
    messages[i] = { ...message, content: appended };
    return { ...rest, messages };
  }
  messages.push({
    role: "user",
    content: `The original text, which the answer mostly repeats:\n\`\`\`\n${text}\n\`\`\``,
  });
  return { ...rest, messages };
}
