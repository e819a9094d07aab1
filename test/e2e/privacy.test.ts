import { readdirSync, rmSync } from "node:fs";
import { basename, extname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { makeTree } from "../support/fixture.js";
import { edgeWithCliForSuite } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

/** A small repository whose every line, identifier and file name is distinctive. */
const FIXTURE: Record<string, string> = {
  "observatory/spectrograph.ts": `import { readFileSync } from "node:fs";

/** Fits the continuum of a stellar spectrum with a low-order polynomial. */
export function fitStellarContinuum(wavelengths: number[], fluxDensity: number[]): number[] {
  const normalisedFlux = fluxDensity.map((f) => f / Math.max(...fluxDensity));
  return wavelengths.map((w, index) => normalisedFlux[index] * (1 + w / 6563));
}

export class EchelleOrderTracer {
  constructor(private readonly blazeFunction: (order: number) => number) {}
  traceEchelleOrders(detectorFrame: number[][]): number[] {
    return detectorFrame.map((row, order) => row.reduce((a, b) => a + b, 0) * this.blazeFunction(order));
  }
}
`,
  "observatory/calibration/bias_frames.py": `def combine_bias_frames(frame_stack, sigma_threshold=3.0):
    """Median-combines bias frames after rejecting cosmic-ray outliers."""
    rejected_pixels = [p for p in frame_stack if abs(p) < sigma_threshold]
    return sorted(rejected_pixels)[len(rejected_pixels) // 2]


class FlatFieldCorrector:
    def apply_flatfield(self, science_frame, master_flat):
        return [s / m for s, m in zip(science_frame, master_flat)]
`,
  "pipeline/scheduler.go": `package pipeline

// ScheduleExposureQueue orders exposures by airmass before twilight begins.
func ScheduleExposureQueue(exposures []Exposure, twilightStart float64) []Exposure {
	sortedByAirmass := make([]Exposure, len(exposures))
	copy(sortedByAirmass, exposures)
	return sortedByAirmass
}
`,
  "docs/observing-runbook.md": `# Observing runbook

Open the dome only when relative humidity is below eighty-five percent.
Slew the telescope to the zenith before closing the mirror covers.
`,
};

const KEYWORDS = new Set(
  "import export function return const class constructor private readonly number package append sorted float64 exposures".split(
    " ",
  ),
);

/** Every line of code (trimmed, 8 characters or more), identifier over six characters, and file name. */
function needles(files: Record<string, string>): string[] {
  const out = new Set<string>();
  for (const [path, text] of Object.entries(files)) {
    out.add(basename(path));
    out.add(basename(path, extname(path)));
    for (const line of text.split("\n")) if (line.trim().length >= 8) out.add(line.trim());
    for (const [identifier] of text.matchAll(/[A-Za-z_][A-Za-z0-9_]*/g))
      if (identifier.length > 6 && !KEYWORDS.has(identifier)) out.add(identifier);
  }
  return [...out];
}

describe("no code at rest", () => {
  const suite = edgeWithCliForSuite();
  const cli = suite.cli;

  it("indexes a repository, then finds none of its lines, identifiers or file names in storage or logs", async () => {
    const dir = makeTree(FIXTURE);
    const indexed = cli(["--json", "index", dir]);
    expect(indexed.code, indexed.stderr).toBe(0);
    // The index is real: a question finds its answer, so the scan below is over storage that holds it.
    const hits = JSON.parse(cli(["--json", "search", "fit the continuum of a stellar spectrum", dir]).stdout);
    expect(hits[0].path).toBe("observatory/spectrograph.ts");
    const found = JSON.parse(cli(["--json", "search", "combine bias frames rejecting outliers", dir]).stdout);
    expect(found[0].path).toBe("observatory/calibration/bias_frames.py");

    const all = needles(FIXTURE);
    expect(all.length).toBeGreaterThan(60);
    expect(await scanDirectoryFor(suite.edge.persistTo, all)).toEqual([]);
    const logs = suite.edge.output();
    expect(all.filter((needle) => logs.includes(needle))).toEqual([]);

    // Deleting a file removes it from search; deleting the workspace removes its index from R2.
    rmSync(join(dir, "observatory/calibration/bias_frames.py"));
    expect(cli(["index", dir]).code).toBe(0);
    const after = JSON.parse(cli(["--json", "search", "combine bias frames rejecting outliers", dir]).stdout);
    expect(after.map((h: { path: string }) => h.path)).not.toContain("observatory/calibration/bias_frames.py");

    const r2 = join(suite.edge.persistTo, "v3", "r2");
    const blobs = () => readdirSync(join(r2, "sextant-index", "blobs")).length;
    expect(blobs()).toBeGreaterThan(0);
    expect(cli(["workspace", "delete", dir, "--yes"]).code).toBe(0);
    const gone = cli(["--json", "search", "stellar continuum", dir]);
    expect(gone.code).not.toBe(0);
    expect(blobs()).toBe(0);
  });
});
