/**
 * Lint rules for the Terraform in gpu-backends/, on parsed HCL. Each returns its violations as
 * "file: message" lines, empty when the rule holds, so a test can show every problem at once.
 */
import { dirname, relative, resolve } from "node:path";
import { findSecrets } from "../../client/index/secrets.js";
import type { Body, HclFile, TfModule } from "./hcl.js";

const where = (file: string) => relative(process.cwd(), file) || file;

/** `= 1.2.3`, `1.2.3` or `~> 1.2` / `~> 1.2.3`: an exact version or a pessimistic constraint. */
const PINNED = /^\s*(=\s*)?\d+\.\d+\.\d+\s*$|^\s*~>\s*\d+\.\d+(\.\d+)?\s*$/;

/**
 * Every directory of `.tf` files declares `required_version` and, for each provider its resources,
 * data sources and provider blocks use, a source and a pinned version; a module called from a
 * registry pins its version too.
 */
export function pinnedVersions(modules: TfModule[]): string[] {
  const problems: string[] = [];
  for (const module of modules) {
    const dir = where(module.dir);
    const terraform = module.unlabelled("terraform").map((t) => t.body);
    const requiredVersion = terraform.find((t) => t.required_version !== undefined)?.required_version;
    if (typeof requiredVersion !== "string" || !PINNED.test(requiredVersion))
      problems.push(`${dir}: required_version must be exact or ~> (found ${JSON.stringify(requiredVersion)})`);
    const required: Record<string, Body> = Object.assign(
      {},
      ...terraform.flatMap((t) => (t.required_providers ?? []) as Body[]),
    );
    const used = new Set([
      ...module.resources("resource").map((r) => r.type.split("_")[0]!),
      ...module.resources("data").map((r) => r.type.split("_")[0]!),
      ...module.blocks("provider").map((p) => p.name),
    ]);
    for (const provider of used) {
      const spec = required[provider];
      if (!spec) problems.push(`${dir}: provider ${provider} is used but not in required_providers`);
      else if (typeof spec.source !== "string") problems.push(`${dir}: provider ${provider} has no source`);
      else if (typeof spec.version !== "string" || !PINNED.test(spec.version))
        problems.push(
          `${dir}: provider ${provider} version must be exact or ~> (found ${JSON.stringify(spec.version)})`,
        );
    }
    for (const call of module.blocks("module")) {
      const source = String(call.body.source);
      if (!source.startsWith("./") && !source.startsWith("../") && !PINNED.test(String(call.body.version ?? "")))
        problems.push(`${dir}: module ${call.name} from ${source} must pin an exact or ~> version`);
    }
  }
  return problems;
}

/** Every variable has a type and a description. */
export function typedVariables(files: HclFile[]): string[] {
  return files.flatMap((f) =>
    Object.entries((f.body.variable ?? {}) as Record<string, Body[]>).flatMap(([name, [body]]) => [
      ...(body?.type === undefined ? [`${where(f.path)}: variable ${name} has no type`] : []),
      ...(typeof body?.description !== "string" || !body.description.trim()
        ? [`${where(f.path)}: variable ${name} has no description`]
        : []),
    ]),
  );
}

/** No AWS account id (12 digits), in an ARN or anywhere else: they come from the caller's identity. */
export function noAccountIds(files: { path: string; text: string }[]): string[] {
  return files.flatMap((f) =>
    [...f.text.matchAll(/(?<![0-9])[0-9]{12}(?![0-9])/g)].map(
      (m) => `${where(f.path)}:${lineOf(f.text, m.index!)}: ${m[0]} looks like an AWS account id`,
    ),
  );
}

/** Resources that would put a secret's value into Terraform state. */
const SECRET_IN_STATE = [
  "aws_secretsmanager_secret_version",
  "aws_ssm_parameter",
  "aws_iam_access_key",
  "random_password",
  "tls_private_key",
];
const SECRET_NAME = /(password|passwd|secret|token|api_?key|private_?key|access_?key)/i;
/**
 * Literal values a secret-named attribute may hold: a Worker secret's name (POOL_TAB_US_EAST_KEY)
 * names a secret without being one, and a plain word is a setting (http_tokens = "required").
 */
const NOT_A_SECRET = /^[A-Z][A-Z0-9_]*$|^[a-z]+(-[a-z]+)*$/;

/**
 * No secret in code or state: secretlint's recommended rules and the credential-name check the
 * client uses on every file, literal values in secret-named attributes, and no resource that
 * stores a secret's value in state.
 */
export async function noSecrets(
  files: (HclFile | { path: string; text: string; body?: undefined })[],
): Promise<string[]> {
  const problems: string[] = [];
  for (const f of files) {
    for (const found of await findSecrets(f.path, f.text))
      problems.push(`${where(f.path)}:${lineOf(f.text, found.start)}: possible secret (${found.rule})`);
    walk(f.body, [], (path, value) => {
      const name = path.at(-1) ?? "";
      if (SECRET_NAME.test(name) && typeof value === "string" && value !== "" && !value.includes("${"))
        if (!NOT_A_SECRET.test(value) && !/description|_arn$|_name$|_id$/.test(name))
          problems.push(`${where(f.path)}: ${path.join(".")} holds a literal secret`);
    });
    for (const type of Object.keys(f.body?.resource ?? {}))
      if (SECRET_IN_STATE.includes(type))
        problems.push(`${where(f.path)}: resource ${type} would store a secret's value in Terraform state`);
  }
  return problems;
}

const PUBLIC_HUB =
  /huggingface\.co|\bhf\.co\b|hf_hub_download|snapshot_download|huggingface-cli|\bhf download\b|HF_TOKEN|HUGGING_?FACE_HUB_TOKEN|modelscope/i;

/**
 * Weights never come from a public model hub: no hub URL, CLI or token anywhere, and every
 * template that starts a server runs it with HF_HUB_OFFLINE=1, so a model path that is not on
 * disk fails instead of being fetched.
 */
export function noPublicHub(files: { path: string; text: string }[]): string[] {
  const problems: string[] = [];
  for (const f of files) {
    for (const m of f.text.matchAll(new RegExp(PUBLIC_HUB, "gi")))
      problems.push(`${where(f.path)}:${lineOf(f.text, m.index!)}: ${m[0]} (weights come from the operator's bucket)`);
    if (/\bdocker run\b|\bvllm serve\b/.test(f.text) && !/\bHF_HUB_OFFLINE=1\b/.test(f.text))
      problems.push(`${where(f.path)}: starts a server without HF_HUB_OFFLINE=1`);
  }
  return problems;
}

/**
 * The edge reaches nodes over HTTPS only: every listener is HTTPS with a TLS policy, nothing opens
 * any other port to an address range, target groups check vLLM's /health, and Auto Scaling groups
 * replace nodes on those checks.
 */
export function httpsOnly(module: TfModule): string[] {
  const dir = where(module.dir);
  const of = (type: string) => module.resources("resource").filter((r) => r.type === type);
  const problems: string[] = [];
  for (const l of of("aws_lb_listener"))
    if (l.body.protocol !== "HTTPS" || typeof l.body.ssl_policy !== "string")
      problems.push(`${dir}: listener ${l.name} is not HTTPS with a TLS policy`);
  for (const rule of of("aws_vpc_security_group_ingress_rule"))
    if (rule.body.cidr_ipv4 !== undefined && (rule.body.from_port !== 443 || rule.body.to_port !== 443))
      problems.push(`${dir}: ingress ${rule.name} opens a port other than 443 to an address range`);
  for (const tg of of("aws_lb_target_group"))
    if (tg.body.health_check?.[0]?.path !== "/health")
      problems.push(`${dir}: target group ${tg.name} does not check /health`);
  for (const asg of of("aws_autoscaling_group"))
    if (asg.body.health_check_type !== "ELB")
      problems.push(`${dir}: autoscaling group ${asg.name} ignores the load balancer's health checks`);
  if (of("aws_lb_listener").length === 0) problems.push(`${dir}: no listener`);
  return problems;
}

/**
 * Scaling follows the servers' queue: every alarm that acts on an Auto Scaling policy reads
 * RequestsWaiting (vllm:num_requests_waiting), none reads a utilisation metric, and some alarm
 * adds capacity on it.
 */
export function queueScaling(module: TfModule): string[] {
  const dir = where(module.dir);
  const problems: string[] = [];
  const alarms = module.resources("resource").filter((r) => r.type === "aws_cloudwatch_metric_alarm");
  const scalesOut = module
    .resources("resource")
    .filter((r) => r.type === "aws_autoscaling_policy" && r.body.policy_type !== "SimpleScaling")
    .map((r) => `aws_autoscaling_policy.${r.name}`);
  let out = false;
  for (const alarm of alarms) {
    const metrics = [
      alarm.body.metric_name,
      ...((alarm.body.metric_query ?? []) as Body[]).map((q) => q.metric?.[0]?.metric_name),
    ].filter((m): m is string => typeof m === "string");
    const actions = JSON.stringify(alarm.body.alarm_actions ?? "");
    if (!actions.includes("aws_autoscaling_policy.")) continue;
    if (metrics.some((m) => /utili[sz]ation|gpu|cpu/i.test(m)))
      problems.push(`${dir}: alarm ${alarm.name} scales on ${metrics.join(", ")}, not the queue`);
    else if (!metrics.includes("RequestsWaiting"))
      problems.push(`${dir}: alarm ${alarm.name} does not read RequestsWaiting`);
    else if (scalesOut.some((policy) => actions.includes(policy))) out = true;
  }
  if (!out) problems.push(`${dir}: no alarm adds nodes on RequestsWaiting`);
  return problems;
}

/**
 * Region roots are data: each calls the shared module by relative path and declares nothing of
 * its own but its AWS provider, and the boilerplate beside main.tf is the same in every root, so
 * a new region is a copied directory with a new main.tf.
 */
export function regionRoots(roots: TfModule[], sharedModule: string): string[] {
  const problems: string[] = [];
  const boilerplate = new Map<string, Map<string, string>>();
  for (const root of roots) {
    const dir = where(root.dir);
    const calls = root.blocks("module");
    if (calls.length !== 1) problems.push(`${dir}: calls ${calls.length} modules instead of the shared one`);
    for (const call of calls) {
      const source = String(call.body.source);
      if (!source.startsWith("../") || resolve(root.dir, source) !== resolve(sharedModule))
        problems.push(`${dir}: module ${call.name} comes from ${source}, not the shared ${where(sharedModule)}`);
    }
    for (const kind of ["resource", "data"] as const)
      for (const r of root.resources(kind))
        problems.push(`${dir}: declares ${kind} ${r.type}.${r.name}; roots are data`);
    const providers = root.blocks("provider");
    if (
      providers.length !== 1 ||
      providers[0]!.name !== "aws" ||
      !/^[a-z]{2}-[a-z]+-\d$/.test(providers[0]!.body.region)
    )
      problems.push(`${dir}: needs exactly one aws provider with a literal AWS region`);
    for (const f of root.files) {
      const name = f.path.slice(dirname(f.path).length + 1);
      if (name === "main.tf") continue;
      if (!boilerplate.has(name)) boilerplate.set(name, new Map());
      boilerplate.get(name)!.set(dir, f.text);
    }
  }
  for (const [name, byRoot] of boilerplate) {
    if (byRoot.size !== roots.length)
      problems.push(`${name} is in ${byRoot.size} of ${roots.length} region roots; every root has the same files`);
    if (new Set(byRoot.values()).size > 1) problems.push(`${name} differs between region roots`);
  }
  return problems;
}

function walk(value: unknown, path: string[], visit: (path: string[], value: unknown) => void): void {
  if (Array.isArray(value)) value.forEach((item) => walk(item, path, visit));
  else if (value !== null && typeof value === "object")
    for (const [key, item] of Object.entries(value)) walk(item, [...path, key], visit);
  else visit(path, value);
}

function lineOf(text: string, offset: number): number {
  return text.slice(0, offset).split("\n").length;
}
