/**
 * Five tasks of the real task set (three npm packages' and two Debian source packages'), built as
 * `npm run bench:tasks` builds them (pinned sources downloaded from the npm registry and the Debian
 * archive, each checked on the host), pushed to `npm start`'s edge as `sextant envs push` pushes a
 * set, and validated through the eval routes: an `oracle` run (each task's reference solution) must
 * score 1 on every task and a `noop` run 0, with no task reported broken. A sixth task, a copy of
 * one of them whose solution does nothing, is there to be reported broken, so the check is seen to
 * catch one.
 */
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { formatVerdicts, validateOnEdge } from "../../bench/tasks/validate-all.js";
import { ROOT } from "../support/local-edge.js";

const SAMPLE = [
  "bit-twiddle-trailing-zeros-count",
  "camelize-dotted-keys",
  "process-warning-format-two-args",
  "inflection-ordinal-teens",
  "webencodings-utf8-bom",
];
/** The copy whose solution does nothing: its oracle scores 0. */
const SABOTAGED = "train/zz-solution-does-nothing";

describe("a sample of the real task set", () => {
  const out = mkdtempSync(join(tmpdir(), "sextant-task-sample-"));

  it("builds five tasks from pinned npm and Debian sources", async () => {
    const { stdout } = await promisify(execFile)(
      "npm",
      ["run", "bench:tasks", "--", "--only", SAMPLE.join(","), "--out", out],
      { cwd: ROOT, timeout: 900_000, maxBuffer: 64 * 1024 * 1024 },
    );
    expect(stdout).toMatch(/built 5, skipped 0 /);
    const ecosystems = SAMPLE.map((id) => {
      const toml = readFileSync(join(out, "train", id, "task.toml"), "utf8");
      return /^ecosystem = "(\w+)"/m.exec(toml)?.[1];
    });
    expect(ecosystems.sort()).toEqual(["debian", "debian", "npm", "npm", "npm"]);
  }, 960_000);

  it("scores 1 with the oracle and 0 with noop on every task, through the eval routes", async () => {
    cpSync(join(out, "train", SAMPLE[1]!), join(out, SABOTAGED), { recursive: true });
    writeFileSync(join(out, SABOTAGED, "solution", "solve.sh"), "#!/bin/sh\nexit 0\n");

    const result = await validateOnEdge(out, { concurrency: 3 });
    const table = formatVerdicts(result.rows);
    const real = result.rows.filter((r) => r.name !== SABOTAGED);
    expect(real.map((r) => r.name).sort(), table).toEqual(SAMPLE.map((id) => `train/${id}`).sort());
    for (const row of real) expect(row, table).toMatchObject({ oracle: 1, noop: 0, broken: false });
    expect(
      result.rows.find((r) => r.name === SABOTAGED),
      table,
    ).toMatchObject({ oracle: 0, noop: 0, broken: true });

    // The edge's own reports: every attempt ended, the copy alone marked broken and left out of the figures.
    const sabotaged = result.map.tasks[SABOTAGED]!.index;
    for (const [report, want] of [
      [result.oracle, 1],
      [result.noop, 0],
    ] as const) {
      expect(report.status).toBe("ended");
      expect(report.tasks).toHaveLength(6);
      for (const task of report.tasks) {
        expect(task.attempts).toHaveLength(1);
        if (task.index === sabotaged) expect(task.broken).toMatchObject({ oracle: 0 });
        else {
          expect(task.broken).toBeNull();
          expect(task.attempts[0]!.reward).toBe(want);
        }
      }
      expect(report.summary).toMatchObject({ tasks: 6, counted: 5, attempts: 5, passed: 5 * want, passAt1: want });
    }
  }, 900_000);
});
