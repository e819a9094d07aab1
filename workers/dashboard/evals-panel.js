// The dashboard's Evals panel (page.html's #evals): pass@1 over time, a line per model and
// checkpoint; the window's runs in a table; and two chosen runs compared task by task, as
// `GET /admin/dashboard/evals/compare` compares them (protocol/evals/stats.ts's compareRuns, the
// interval `sextant eval compare` prints). It runs after the page's own script and draws with its
// `data`, `chart`, `fill`, `number` and `percent`.
"use strict";
{
  const runs = data.evals.runs;
  const label = (r) => `${r.model ?? r.agent}${r.checkpoint ? `@${r.checkpoint}` : ""}`;
  const when = (iso) => (iso ? iso.replace("T", " ").slice(0, 16) : "–");
  const seconds = (iso) => Date.parse(iso) / 1000;
  /** A rate as the page shows rates, with its exact value on hover. */
  const rate = (v) => ({ text: percent(v), className: "num", title: v === null ? "" : String(v) });
  const points = (d) =>
    d === null || d === undefined ? "–" : `${d < 0 ? "−" : d > 0 ? "+" : "±"}${Math.abs(d * 100).toFixed(1)} pts`;
  const usd = (v) => (v === null || v === undefined ? "–" : `$${v.toFixed(v < 1 ? 4 : 2)}`);
  const ratio = (v) => (v === null || v === undefined ? "–" : `${v.toFixed(2)}×`);
  const duration = (ms) =>
    ms < 60_000
      ? `${(ms / 1000).toFixed(1)} s`
      : ms < 3_600_000
        ? `${(ms / 60_000).toFixed(1)} min`
        : `${(ms / 3_600_000).toFixed(1)} h`;

  // pass@1 over time: a series per model@checkpoint, each run a point at its creation. A series
  // spans the other series' times (spanGaps), so each model's line joins its own runs.
  const shown = runs.filter((r) => r.summary && r.summary.passAt1 !== null).reverse();
  const labels = [...new Set(shown.map(label))];
  const xs = [...new Set(shown.map((r) => seconds(r.createdAt)))].sort((a, b) => a - b);
  chart(
    "evals",
    "pass@1 by model@checkpoint",
    xs,
    labels.map((l) => ({
      label: l,
      values: xs.map((x) => {
        const at = shown.filter((r) => label(r) === l && seconds(r.createdAt) === x);
        return at.length ? at.reduce((s, r) => s + r.summary.passAt1, 0) / at.length : null;
      }),
      options: { spanGaps: true, value: (_u, v) => percent(v) },
    })),
    {
      yRange: [0, 1],
      yValues: (_u, ticks) => ticks.map((t) => `${Math.round(t * 100)}%`),
      // Runs made minutes apart (or one run alone) still get an axis of an hour or more around them.
      xRange: (_u, min, max) => {
        const pad = Math.max(1800, (max - min) * 0.05);
        return [min - pad, max + pad];
      },
    },
  );

  fill(
    "eval-runs",
    runs.map((r) => {
      const s = r.summary;
      return [
        when(r.createdAt),
        r.orgName,
        { text: label(r), sub: r.model ? "" : "no model", title: r.id },
        { text: r.taskset, className: "name" },
        r.status === "running" ? { text: "running", className: "warn" } : r.status,
        { text: number(s?.tasks), className: "num", sub: s && s.counted < s.tasks ? `${s.counted} counted` : "" },
        { text: number(r.attempts), className: "num" },
        rate(s ? s.passAt1 : null),
        { ...rate(s ? s.passAtK.value : null), sub: `k = ${r.attempts}` },
        { text: s?.meanReward === null || !s ? "–" : s.meanReward.toFixed(3), className: "num" },
        { text: usd(s?.costUsd), className: "num" },
        { text: s ? duration(s.wallMs) : "–", className: "num" },
        when(r.endedAt),
      ];
    }),
    "No eval run in these days.",
  );

  // One run against another: two selects, the newest run as B and the one before it as A.
  const comparison = document.querySelector('[data-testid="eval-comparison"]');
  const selects = ["eval-a", "eval-b"].map((id) => document.querySelector(`[data-testid="${id}"]`));
  for (const select of selects)
    for (const r of runs) select.add(new Option(`${when(r.createdAt)} ${label(r)} (${r.orgName}, ${r.id})`, r.id));
  if (runs.length >= 2) {
    selects[0].value = runs[1].id;
    selects[1].value = runs[0].id;
  }

  function figure(testid, text, caption, sub) {
    const div = document.createElement("div");
    div.className = "figure";
    const b = document.createElement("b");
    b.dataset.testid = testid;
    b.textContent = text;
    const span = document.createElement("span");
    span.textContent = caption;
    div.append(b, span);
    if (sub) {
      const small = document.createElement("span");
      small.className = "sub";
      small.dataset.testid = `${testid}-sub`;
      small.textContent = sub;
      div.append(small);
    }
    return div;
  }

  function drawComparison({ comparison: c }) {
    const figures = document.createElement("div");
    figures.className = "figures";
    const interval = c.interval
      ? `${Math.round(c.interval.confidence * 100)}% interval ${points(c.interval.low)} to ${points(c.interval.high)}`
      : "no interval: no task compared";
    figures.append(
      figure("eval-pass-a", percent(c.passAt1A), "pass@1 of A"),
      figure("eval-pass-b", percent(c.passAt1B), "pass@1 of B"),
      figure("eval-difference", points(c.difference), "B − A", interval),
      figure("eval-record", `${c.wins} / ${c.losses} / ${c.ties}`, "B's wins / losses / ties"),
      figure("eval-cost-ratio", ratio(c.costRatio), "cost per attempt, B / A"),
      figure("eval-time-ratio", ratio(c.timeRatio), "time per attempt, B / A"),
    );
    const table = document.createElement("table");
    table.dataset.testid = "eval-tasks";
    const head = table.createTHead().insertRow();
    for (const [text, num] of [
      ["task (A's index)", false],
      ["pass@1 A", true],
      ["pass@1 B", true],
      ["B against A", false],
      ["difference", true],
    ]) {
      const th = document.createElement("th");
      th.textContent = text;
      if (num) th.className = "num";
      head.append(th);
    }
    table.createTBody();
    const only = [
      c.onlyA.length ? `${c.onlyA.length} task(s) only in A` : "",
      c.onlyB.length ? `${c.onlyB.length} task(s) only in B` : "",
    ].filter(Boolean);
    const note = document.createElement("p");
    note.className = "empty";
    note.textContent = only.join("; ");
    comparison.replaceChildren(figures, table, ...(only.length ? [note] : []));
    fill(
      "eval-tasks",
      c.tasks.map((t) => [
        { text: String(t.indexA), sub: t.sha256.slice(0, 12), title: t.sha256 },
        rate(t.passAt1A),
        rate(t.passAt1B),
        t.result === null
          ? { text: t.excluded, className: "warn" }
          : { text: t.result, className: t.result === "win" ? "ok" : t.result === "loss" ? "bad" : "" },
        { text: points(t.difference), className: "num", title: t.difference === null ? "" : String(t.difference) },
      ]),
      "The two runs share no task.",
    );
  }

  let asked = 0;
  async function compare() {
    const [a, b] = selects.map((s) => s.value);
    if (!a || !b) {
      const p = document.createElement("p");
      p.className = "empty";
      p.textContent = "Choose two runs.";
      comparison.replaceChildren(p);
      return;
    }
    const mine = ++asked;
    delete comparison.dataset.compared;
    let shown;
    try {
      const response = await fetch(
        `/admin/dashboard/evals/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`,
        { headers: { Accept: "application/json" } },
      );
      const body = await response.json().catch(() => ({}));
      shown = response.ok ? body : { error: body.detail ?? `The comparison failed (${response.status}).` };
    } catch (err) {
      shown = { error: `The comparison could not be fetched: ${err.message}` };
    }
    // A later choice's answer wins over an earlier one still on its way.
    if (mine !== asked) return;
    if (shown.error) {
      const p = document.createElement("p");
      p.className = "bad";
      p.textContent = shown.error;
      comparison.replaceChildren(p);
    } else drawComparison(shown);
    comparison.dataset.compared = `${a} ${b}`;
  }
  for (const select of selects) select.addEventListener("change", () => void compare());
  void compare();
}
