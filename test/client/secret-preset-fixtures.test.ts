import { lintSource } from "@secretlint/core";
import { creator as recommended } from "@secretlint/secretlint-rule-preset-recommend";
import { describe, expect, it } from "vitest";
import { findSecrets, redact } from "../../client/index/secrets.js";

/**
 * One true positive for each scanning rule of secretlint's recommended preset, written from the
 * rule's own pattern (the preset's npm package ships no test fixtures). Each is checked against the
 * bare preset first, so a fixture the preset would not flag cannot pass here by accident. They are
 * built at run time from a seeded generator so that no scanner takes this file for a leak.
 */
function noise(seed: number, length: number, alphabet: string): string {
  let state = seed;
  let out = "";
  for (let i = 0; i < length; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    out += alphabet[state % alphabet.length];
  }
  return out;
}
const ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const HEX = "0123456789abcdef";
const B64 = ALNUM + "+/";
const an = (seed: number, n: number) => noise(seed, n, ALNUM);

const pem = (kind: string) =>
  [`-----BEGIN ${kind}PRIVATE KEY-----`, "MII" + noise(7, 61, B64), noise(8, 64, B64), noise(9, 40, B64)]
    .join("\n")
    .concat(`\n-----END ${kind}PRIVATE KEY-----`);

interface Fixture {
  rule: string;
  /** The secret as it must not appear after redaction. */
  secret: string;
  /** The file that holds it. */
  text: (secret: string) => string;
  /** Its name, where a rule looks at the name. */
  file?: string;
}

/** A 1Password service-account token is base64 of a JSON object. */
const opsToken = () => {
  const json = JSON.stringify({ email: `${an(37, 12)}@svc.lcl`, secretKey: an(38, 40), srpX: noise(39, 64, HEX) });
  // The rule's pattern ends in `fQ==`: the closing brace alone in the last base64 group.
  const padded = json.slice(0, -1) + " ".repeat((4 - (json.length % 3)) % 3) + "}";
  return "ops_" + Buffer.from(padded).toString("base64");
};

const P = "@secretlint/secretlint-rule-";
const assign = (s: string) => `const value = "${s}";\n`;
const FIXTURES: Fixture[] = [
  { rule: "aws", secret: noise(1, 40, B64), text: (s) => `AWS_SECRET_ACCESS_KEY=${s}\n` },
  { rule: "aws", secret: noise(2, 40, B64), text: (s) => `{ "aws_secret_access_key": "${s}" }\n` },
  { rule: "npm", secret: "npm_" + an(3, 36), text: assign },
  { rule: "npm", secret: an(4, 36), text: (s) => `//registry.npmjs.org/:_authToken=${s}\n`, file: ".npmrc" },
  {
    rule: "npm",
    secret: noise(40, 40, HEX),
    text: (s) => `{ "dependencies": { "x": "git+https://${s}:x-oauth-basic@github.com/o/x.git" } }\n`,
    file: "package.json",
  },
  { rule: "slack", secret: `xoxb-${noise(5, 12, "0123456789")}-${an(6, 24)}`, text: assign },
  {
    rule: "slack",
    secret: `https://hooks.slack.com/services/T${an(7, 10)}/B${an(8, 10)}/${an(9, 24)}`,
    text: assign,
  },
  { rule: "basicauth", secret: `https://deploy:${an(10, 16)}@ci.internal.io`, text: assign },
  { rule: "openai", secret: `sk-proj-${an(11, 74)}T3BlbkFJ${an(12, 74)}`, text: assign },
  { rule: "anthropic", secret: `sk-ant-api03-${an(13, 93)}AA`, text: assign },
  { rule: "groq", secret: "gsk_" + an(14, 52), text: assign },
  { rule: "huggingface", secret: "hf_" + noise(15, 34, ALNUM.slice(0, 52)), text: assign },
  { rule: "linear", secret: "lin_api_" + an(16, 40), text: assign },
  { rule: "notion", secret: "ntn_" + noise(17, 11, "0123456789") + an(18, 35), text: assign },
  { rule: "privatekey", secret: pem("RSA "), text: (s) => `const pem = \`${s}\`;\n` },
  { rule: "privatekey", secret: pem("OPENSSH "), text: (s) => `${s}\n` },
  { rule: "sendgrid", secret: `SG.${an(19, 22)}.${an(20, 43)}`, text: assign },
  { rule: "shopify", secret: "shpat_" + noise(21, 32, HEX), text: assign },
  { rule: "github", secret: "ghp_" + an(22, 36), text: assign },
  { rule: "github", secret: "github_pat_" + an(23, 82), text: assign },
  { rule: "gitlab", secret: "glpat-" + an(24, 20), text: assign },
  { rule: "grafana", secret: "glc_" + an(25, 48), text: assign },
  { rule: "grafana", secret: `glsa_${an(26, 32)}_${noise(27, 8, HEX)}`, text: assign },
  { rule: "1password", secret: opsToken(), text: assign },
  {
    rule: "database-connection-string",
    secret: `postgres://app:${an(29, 14)}@db.internal:5432/main`,
    text: (s) => `function dsn() {\n  return "${s}"; }\n`,
  },
  { rule: "database-connection-string", secret: `mysql://root:${an(30, 14)}@10.0.0.4:3306/shop`, text: assign },
  {
    rule: "database-connection-string",
    secret: `mongodb+srv://svc:${an(31, 14)}@cluster0.mongodb.net/app`,
    text: (s) => `MONGO_URL=${s}\n`,
  },
  { rule: "hashicorp-vault", secret: "hvs." + an(32, 95), text: assign },
  { rule: "vercel", secret: "vcp_" + an(33, 24), text: assign },
  { rule: "databricks", secret: "dapi" + noise(34, 32, HEX), text: assign },
  { rule: "docker", secret: "dckr_pat_" + an(35, 27), text: assign },
  { rule: "figma", secret: "figd_" + an(36, 40), text: assign },
];

async function presetRules(file: string, text: string): Promise<string[]> {
  const ext = file.slice(file.lastIndexOf("."));
  const result = await lintSource({
    source: { filePath: file, content: text, ext, contentType: "text" },
    options: {
      config: { rules: [{ id: `${P}preset-recommend`, rule: recommended }] },
      noPhysicFilePath: true,
    },
  });
  return result.messages.map((m) => m.ruleId);
}

describe("secretlint's recommended preset, through the device's redaction", () => {
  it.each(FIXTURES.map((f, i) => [`${f.rule} #${i}`, f] as const))(
    "redacts every secret the preset flags: %s",
    async (_name, fixture) => {
      const text = fixture.text(fixture.secret);
      const file = fixture.file ?? "fixture.txt";
      expect(await presetRules(file, text)).toContain(P + fixture.rule);
      const secrets = await findSecrets(`project/${file}`, text);
      expect(secrets.map((s) => s.rule)).toContain(P + fixture.rule);
      const clean = redact(text, secrets);
      // No 8-character run of the secret survives: neither the whole nor a tail left outside the range.
      for (let i = 0; i + 8 <= fixture.secret.length; i += 4) {
        const piece = fixture.secret.slice(i, i + 8);
        expect(clean, `${piece} of ${fixture.rule}`).not.toContain(piece);
      }
    },
  );
});
