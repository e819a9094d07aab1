import { describe, expect, it } from "vitest";
import { findSecrets, NAMED_CREDENTIAL_RULE, redact, REDACTED } from "../../client/index/secrets.js";

// Built at run time so that no scanner mistakes this test file for a leak.
const AWS_KEY = ["AKIA", "QYLPMN5HHHFPZAM2"].join("");
const AWS_SECRET = ["tfD8UbqBuhEyMC", "hnWnYzxgSvQZRMbpHt", "0ESg4R/dT"].join("");
const GITHUB_TOKEN = ["ghp_", "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx"].join("");
const PRIVATE_KEY = [
  "-----BEGIN RSA PRIVATE KEY-----",
  "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi3+6BxJnZm3OKOiVOyJIPbjYbj",
  "KRCA/YFpnpiSeU6k4Zkq0D5SDF28vpXdHA1OjGnYAZHsEwaIEuyYG9XYSxTeZdST",
  "-----END RSA PRIVATE KEY-----",
].join("\n");

describe("secret filtering", () => {
  it("finds cloud keys, tokens and private keys, and redacts them without moving any line", async () => {
    const text = [
      `const aws = { accessKeyId: "${AWS_KEY}", secretAccessKey: "${AWS_SECRET}" };`,
      `const gh = "${GITHUB_TOKEN}";`,
      `const pem = \`${PRIVATE_KEY}\`;`,
      "export function add(a, b) { return a + b; }",
    ].join("\n");
    const secrets = await findSecrets("config.ts", text);
    // The maintained rules do the work here, not only the entropy check.
    expect(secrets.some((s) => s.rule.includes("secretlint"))).toBe(true);
    const clean = redact(text, secrets);
    // An AWS access key id names a key but is not one; the secret access key is what must not leave.
    for (const secret of [AWS_SECRET, GITHUB_TOKEN, "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi3"]) {
      expect(clean).not.toContain(secret);
    }
    expect(clean).toContain(REDACTED);
    expect(clean.split("\n")).toHaveLength(text.split("\n").length);
    expect(clean).toContain("export function add(a, b) { return a + b; }");
  });

  it("leaves ordinary code alone: identifiers, paths, prose and hex-free constants", async () => {
    const text = [
      "import { createWorkspaceSecretFromEnvironment } from './workspace/secret-store';",
      "const url = 'https://example.com/api/v1/workspaces/list';",
      "// The quick brown fox jumps over the lazy dog again and again.",
      "const MAX_RETRY_DELAY_MILLISECONDS = 30_000;",
      "type Ai_Cf_Meta_Llama_3_3_70B_Instruct_Fp8_Fast_Input = {};",
      "// https://developer.mozilla.org/docs/Web/API/MessageChannel/port1",
      'const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";',
    ].join("\n");
    expect(await findSecrets("a.ts", text)).toEqual([]);
  });

  it("catches a random-looking token no provider rule knows when its name says it is a credential", async () => {
    const token = ["Zx8Qp2LmV7", "nR4tYb9KcW", "3sHd6Jf1Ga"].join("");
    const text = `API_TOKEN = "${token}"\n`;
    const secrets = await findSecrets("settings.py", text);
    expect(secrets.map((s) => s.rule)).toContain(NAMED_CREDENTIAL_RULE);
    expect(redact(text, secrets)).toBe(`API_TOKEN = "${REDACTED}"\n`);
    // Unquoted, as in .env and YAML files.
    const env = `export SERVICE_API_KEY=${token}\nservice:\n  auth_token: ${token}\n`;
    expect(redact(env, await findSecrets(".env", env))).toBe(
      `export SERVICE_API_KEY=${REDACTED}\nservice:\n  auth_token: ${REDACTED}\n`,
    );
  });

  it("keeps identifiers with digits and base64 test data that no credential name holds", async () => {
    const text = [
      "export type JsonSchema7NativeEnumType = {",
      "  type: string;",
      "};",
      'expect(encode("hello world, this is a test")).toBe("aGVsbG8gd29ybGQsIHRoaXMgaXMgYSB0ZXN0");',
      'const fixture = "SGVsbG8gV29ybGQhIFRoaXMgaXMgYSB0ZXN0IHN0cmluZw==";',
      "const parseUInt8ArrayBase64UrlSafeV2 = () => 0;",
    ].join("\n");
    expect(await findSecrets("types.ts", text)).toEqual([]);
  });

  it("redacts a quoted connection string up to its closing quote and no further", async () => {
    const url = ["postgres://admin:", "Xk29fjQ7vL", "@db.internal:5432/app"].join("");
    const text = `function dsn() {\n  return "${url}"; }\nconst x = 1;\n`;
    const clean = redact(text, await findSecrets("db.ts", text));
    expect(clean).toBe(`function dsn() {\n  return "${REDACTED}"; }\nconst x = 1;\n`);
  });

  it("redacts the whole AWS secret key, whose rule reports a range that starts at the variable's name", async () => {
    const key = ["wJalrXUtnFEMI", "K7MDENGbPxRfiCY", "Zq81mTbVw0sPLe"].join("/").slice(0, 40);
    const text = `AWS_SECRET_ACCESS_KEY=${key}\nregion=eu-west-1\n`;
    const clean = redact(text, await findSecrets(".env.example", text));
    expect(clean).not.toContain(key.slice(-12));
    expect(clean).toContain("region=eu-west-1");
  });

  it("scans files whose names hold a newline, a carriage return or control characters", async () => {
    // secretlint turns the file path into performance-mark names; these names made it throw.
    for (const name of ["a\nb.ts", "dir\r/x\ty.py", "\u0001\u007f.js", "odd\n.\n"]) {
      const secrets = await findSecrets(name, `const gh = "${GITHUB_TOKEN}";\n`);
      expect(secrets.length, name).toBeGreaterThan(0);
    }
  });
});
