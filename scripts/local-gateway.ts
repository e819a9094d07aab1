/**
 * The local default of `npm start` when no real backend is configured: two simulated GPU regions
 * (Virginia and London), each serving every pool, with the simulator's models, and a simulated
 * Anthropic Messages API (California) for a chat model the edge translates to it. Everything they
 * return says it is simulated.
 */
import type { GatewayConfigInput } from "../protocol/gateway.js";
import type { BackendOptions } from "../gpu-backends/simulator/simulator.js";

export const LOCAL_MODELS = {
  tab: "tab-simulated",
  chat: "chat-simulated",
  apply: "apply-simulated",
  embed: "embed-simulated",
} as const;

/** A chat model served through the simulated Anthropic Messages API. */
export const LOCAL_ANTHROPIC_MODEL = "claude-simulated";

export const LOCAL_BACKENDS: BackendOptions[] = [
  { id: "sim-us-east", models: Object.values(LOCAL_MODELS), capacity: 32, ttftMs: 30, tokensPerSecond: 150 },
  { id: "sim-eu-west", models: Object.values(LOCAL_MODELS), capacity: 32, ttftMs: 30, tokensPerSecond: 150 },
  {
    id: "sim-anthropic",
    kind: "anthropic",
    models: [LOCAL_ANTHROPIC_MODEL],
    capacity: 32,
    ttftMs: 30,
    tokensPerSecond: 150,
  },
];

export function localGatewayConfig(urls: Record<string, string>): GatewayConfigInput {
  const endpoints = [
    { id: "sim-us-east", region: "us-east", latitude: 39.04, longitude: -77.49 },
    { id: "sim-eu-west", region: "eu-west", latitude: 51.51, longitude: -0.13 },
  ].map((e) => ({ ...e, url: urls[e.id]!, kind: "vllm" as const, capacity: 32 }));
  const pool = (role: "tab" | "chat" | "apply" | "embed") => ({
    role,
    models: [LOCAL_MODELS[role]],
    endpoints: endpoints.map((e) => ({ ...e, model: LOCAL_MODELS[role], checkpoint: `${LOCAL_MODELS[role]}@sim` })),
  });
  const anthropic = {
    id: "sim-anthropic",
    region: "us-west",
    latitude: 37.77,
    longitude: -122.42,
    url: urls["sim-anthropic"]!,
    kind: "anthropic" as const,
    model: LOCAL_ANTHROPIC_MODEL,
    capacity: 32,
  };
  return {
    pools: {
      tab: { ...pool("tab"), fim: "qwen2.5-coder", hedgeAfterMs: 150 },
      chat: pool("chat"),
      apply: pool("apply"),
      embed: pool("embed"),
      claude: { role: "chat", models: [LOCAL_ANTHROPIC_MODEL], endpoints: [anthropic] },
    },
  };
}

/**
 * `npm start` pointed at a real model, one line each: an OpenAI-compatible server for every pool
 * (`INFERENCE_UPSTREAM`, which passes the client's model name through) and the model agent tasks ask
 * it for (`AGENT_MODEL`; the default is the simulator's, which no real server serves).
 */
export const REAL_MODEL_RECIPES = [
  { server: "Ollama", vars: "INFERENCE_UPSTREAM=http://127.0.0.1:11434/v1 AGENT_MODEL=qwen2.5-coder:7b" },
  {
    server: "vLLM",
    vars: "INFERENCE_UPSTREAM=http://127.0.0.1:8000/v1 INFERENCE_UPSTREAM_KIND=vllm AGENT_MODEL=Qwen/Qwen2.5-Coder-7B-Instruct",
  },
  {
    server: "OpenAI",
    vars: "INFERENCE_UPSTREAM=https://api.openai.com/v1 INFERENCE_UPSTREAM_API_KEY=sk-... AGENT_MODEL=gpt-4.1",
  },
] as const;

/** What `npm start` says while only the simulators serve: that their answers are not a model's, and the lines that change it. */
export function realModelHint(command: string): string {
  return (
    `The simulators' answers are placeholders, not a model's: the scripted agent model plays only the fixture tasks.\n` +
    `To use a real model, start with one of:\n` +
    REAL_MODEL_RECIPES.map((r) => `  ${r.vars} ${command}   # ${r.server}\n`).join("")
  );
}

/** How the scripted agent model's refusal of a prompt it has no script for ends: the line that runs a real model. */
export function unscriptedAdvice(command: string): string {
  const ollama = REAL_MODEL_RECIPES[0];
  return (
    `To run a real model, start the edge with one, e.g. with ${ollama.server}: ${ollama.vars} ${command} ` +
    `(${command} prints the lines for vLLM and OpenAI).`
  );
}
