import { Command, Option } from "commander";
import type { EndpointStatus, GatewayStatus } from "../../../protocol/gateway.js";
import { EVENT_CONTENT, PLANS, ROLES, type AbuseThrottle } from "../../../protocol/schemas.js";
import { adminClient, type GlobalOptions } from "../context.js";
import { parseExpiry, printJson, printTable, shortDate } from "../output.js";
import { printCreatedKey, printKeys } from "./keys.js";
import { lakeCommands } from "./lake.js";

const globals = (cmd: Command) => cmd.optsWithGlobals<GlobalOptions>();

export function admin(program: Command): void {
  const admin = program
    .command("admin")
    .description(
      "Operate an edge: orgs, users, keys, abuse throttles, the gateway's backends and the lake (needs its ADMIN_SECRET; found automatically for `npm start`)",
    );

  lakeCommands(admin);

  const orgs = admin.command("orgs").description("Manage orgs");
  orgs
    .command("create")
    .description("Create an org")
    .argument("<name>")
    .addOption(new Option("--plan <plan>", "plan tier").choices(PLANS).default("free"))
    .action(async (name: string, opts: { plan: (typeof PLANS)[number] }, cmd: Command) => {
      const org = await (await adminClient(globals(cmd))).orgs.create({ name, plan: opts.plan });
      if (globals(cmd).json) return printJson(org);
      process.stdout.write(`Created org ${org.id} "${org.name}" on the ${org.plan} plan.\n`);
    });
  orgs
    .command("list")
    .description("List orgs")
    .action(async (_opts, cmd: Command) => {
      const list = await (await adminClient(globals(cmd))).orgs.list();
      if (globals(cmd).json) return printJson(list);
      printTable(list, [
        ["id", (o) => o.id],
        ["name", (o) => o.name],
        ["plan", (o) => o.plan],
        ["created", (o) => shortDate(o.createdAt)],
      ]);
    });
  orgs
    .command("set-plan")
    .description("Move an org to another plan tier")
    .argument("<orgId>")
    .addArgument(new Command().createArgument("<plan>", "plan tier").choices(PLANS))
    .action(async (orgId: string, plan: (typeof PLANS)[number], _opts, cmd: Command) => {
      const org = await (await adminClient(globals(cmd))).orgs.update(orgId, { plan });
      if (globals(cmd).json) return printJson(org);
      process.stdout.write(`Org ${org.id} is now on the ${org.plan} plan.\n`);
    });

  orgs
    .command("set-event-content")
    .description(
      "Let an org's editor events carry content sealed with a key it holds (sealed), or refuse any (none, the default)",
    )
    .argument("<orgId>")
    .addArgument(new Command().createArgument("<mode>", "none or sealed").choices(EVENT_CONTENT))
    .action(async (orgId: string, mode: (typeof EVENT_CONTENT)[number], _opts, cmd: Command) => {
      const org = await (await adminClient(globals(cmd))).orgs.update(orgId, { eventContent: mode });
      if (globals(cmd).json) return printJson(org);
      process.stdout.write(
        org.eventContent === "sealed"
          ? `Org ${org.id}'s events may now carry content sealed with a key it holds.\n`
          : `Org ${org.id}'s events may carry no content.\n`,
      );
    });

  const users = admin.command("users").description("Manage users");
  users
    .command("create")
    .description("Add a user to an org")
    .requiredOption("--org <orgId>", "the org to add the user to")
    .requiredOption("--email <email>", "the user's email")
    .option("--name <name>", "display name")
    .addOption(new Option("--role <role>", "role in the org").choices(ROLES).default("member"))
    .action(async (opts: { org: string; email: string; name?: string; role: (typeof ROLES)[number] }, cmd: Command) => {
      const user = await (
        await adminClient(globals(cmd))
      ).users.create(opts.org, {
        email: opts.email,
        role: opts.role,
        ...(opts.name ? { name: opts.name } : {}),
      });
      if (globals(cmd).json) return printJson(user);
      process.stdout.write(`Created user ${user.id} <${user.email}> as ${user.role} of ${user.orgId}.\n`);
    });
  users
    .command("list")
    .description("List the users of an org")
    .requiredOption("--org <orgId>")
    .action(async (opts: { org: string }, cmd: Command) => {
      const list = await (await adminClient(globals(cmd))).users.list(opts.org);
      if (globals(cmd).json) return printJson(list);
      printTable(list, [
        ["id", (u) => u.id],
        ["email", (u) => u.email],
        ["name", (u) => u.name],
        ["role", (u) => u.role],
        ["created", (u) => shortDate(u.createdAt)],
      ]);
    });

  const keys = admin.command("keys").description("Manage any user's API keys");
  keys
    .command("create")
    .description("Create an API key for a user; the secret is printed once")
    .requiredOption("--user <userId>")
    .requiredOption("--name <name>")
    .option("--expires <when>", "30d, 12h, 45m or an ISO date")
    .action(async (opts: { user: string; name: string; expires?: string }, cmd: Command) => {
      const created = await (
        await adminClient(globals(cmd))
      ).keys.create({
        userId: opts.user,
        name: opts.name,
        ...(opts.expires ? { expiresAt: parseExpiry(opts.expires) } : {}),
      });
      if (globals(cmd).json) return printJson(created);
      printCreatedKey(created);
    });
  keys
    .command("list")
    .description("List an org's API keys")
    .requiredOption("--org <orgId>")
    .action(async (opts: { org: string }, cmd: Command) => {
      const list = await (await adminClient(globals(cmd))).keys.list(opts.org);
      if (globals(cmd).json) return printJson(list);
      printKeys(list);
    });
  keys
    .command("revoke")
    .description("Revoke any API key")
    .argument("<keyId>")
    .action(async (keyId: string, _opts, cmd: Command) => {
      const revoked = await (await adminClient(globals(cmd))).keys.revoke(keyId);
      if (globals(cmd).json) return printJson(revoked);
      process.stdout.write(`Revoked ${revoked.id} "${revoked.name}" at ${revoked.revokedAt}.\n`);
    });

  const abuse = admin.command("abuse").description("Review and lift abuse throttles");
  abuse
    .command("list")
    .description("List active abuse throttles, newest first")
    .option("--all", "include lifted and expired ones (the latest 500)")
    .action(async (opts: { all?: boolean }, cmd: Command) => {
      const list = await (await adminClient(globals(cmd))).abuse.list({ all: opts.all === true });
      if (globals(cmd).json) return printJson(list);
      printThrottles(list);
    });
  abuse
    .command("lift")
    .description("Lift an abuse throttle before it expires")
    .argument("<throttleId>")
    .action(async (throttleId: string, _opts, cmd: Command) => {
      const lifted = await (await adminClient(globals(cmd))).abuse.lift(throttleId);
      if (globals(cmd).json) return printJson(lifted);
      process.stdout.write(`Lifted ${lifted.id} on ${lifted.kind} ${lifted.subject} at ${lifted.liftedAt}.\n`);
    });

  admin
    .command("gateway")
    .description(
      "Show the inference gateway's pools and endpoints: probes, ejections, recovery, and the answering isolate's load",
    )
    .action(async (_opts, cmd: Command) => {
      const status = await (await adminClient(globals(cmd))).gateway.status();
      if (globals(cmd).json) return printJson(status);
      printGatewayStatus(status);
    });
}

/** "12:00:05" for a time on the status's own day, in UTC like every time the CLI prints. */
const clock = (iso: string) => iso.slice(11, 19);

/** How long before `now` (both ISO times), coarsely. */
function ago(iso: string, now: string): string {
  const s = Math.max(0, Math.round((Date.parse(now) - Date.parse(iso)) / 1000));
  return s < 120 ? `${s} s ago` : s < 7200 ? `${Math.round(s / 60)} min ago` : `${Math.round(s / 3600)} h ago`;
}

const percent = (share: number) => `${Math.floor(share * 100)}%`;

/** Why it is out of rotation, or how it is held back: the shared health first, then this isolate's view. */
function endpointState(e: EndpointStatus): string {
  const states: string[] = [];
  if (e.health.probe && !e.health.probe.ok) states.push("failing probes");
  if (e.health.ejectedUntil) states.push(`ejected until ${clock(e.health.ejectedUntil)}`);
  if (!e.health.routable && states.length === 0) states.push("out of rotation");
  if (e.isolate.ejectedUntil && e.isolate.ejectedUntil !== e.health.ejectedUntil)
    states.push(`ejected here until ${clock(e.isolate.ejectedUntil)}`);
  const routing = states.length === 0;
  if (e.isolate.probation) states.push("on probation");
  if (e.isolate.fullUntil) states.push("full");
  if (routing && e.health.slowStart < 1) states.push(`slow start ${percent(e.health.slowStart)}`);
  return states.length ? states.join(", ") : "routable";
}

function probeCell(e: EndpointStatus, now: string): string {
  const probe = e.health.probe;
  if (!probe) return "not yet";
  const result = probe.status !== null ? `${probe.status}` : probe.error!;
  return `${result} in ${probe.ms} ms, ${ago(probe.at, now)}`;
}

export function printGatewayStatus(status: GatewayStatus): void {
  process.stdout.write(
    `Gateway at ${shortDate(status.at)} UTC: configured by ${status.source}, probes every ${status.probeIntervalMs / 1000} s\n\n`,
  );
  printTable(status.pools, [
    ["pool", (p) => p.name],
    ["role", (p) => p.role],
    ["models", (p) => p.models.join(", ")],
    [
      "state",
      (p) =>
        p.down
          ? "down (503)"
          : p.ramp
            ? `recovering: ${percent(p.ramp.admitted)} of free users until ${clock(p.ramp.endsAt)}`
            : "up",
    ],
    ["endpoints", (p) => p.endpoints.join(", ")],
  ]);
  process.stdout.write("\n");
  printTable(status.endpoints, [
    ["endpoint", (e) => e.id],
    ["region", (e) => e.region],
    ["kind", (e) => e.kind],
    ["model", (e) => e.model],
    ["in flight", (e) => `${e.isolate.inflight}/${e.capacity}`],
    ["state", endpointState],
    ["last probe", (e) => probeCell(e, status.at)],
    ["secret", (e) => e.secret],
  ]);
  const y = status.backgroundYield;
  if (y)
    process.stdout.write(
      `\nBackground yield (the isolate that answered): ${y.interactive ? "interactive traffic, background waits its turn" : "no interactive traffic, background goes at once"}; timers ${y.lagMs} ms late; ${y.waiting} waiting; ${y.bypassed} went at once, ${y.admitted} in turn (${y.yielded} held)\n`,
    );
}

/** The state as the edge saw it when it answered; lifted wins over expired. */
const throttleState = (t: AbuseThrottle) => (t.liftedAt ? "lifted" : t.active ? "active" : "expired");

export function printThrottles(list: AbuseThrottle[]): void {
  printTable(list, [
    ["id", (t) => t.id],
    ["kind", (t) => t.kind],
    ["subject", (t) => t.subject],
    ["signal", (t) => t.signal],
    ["observed", (t) => `${t.observed}/${t.threshold}`],
    ["created", (t) => shortDate(t.createdAt)],
    ["expires", (t) => shortDate(t.expiresAt)],
    ["state", throttleState],
    ["reason", (t) => t.reason],
  ]);
}
