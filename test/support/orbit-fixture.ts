/**
 * A small workspace for the search tool's end-to-end tests (MCP, editors): a Kepler solver whose
 * question ("solve Kepler's equation") has one right answer, beside billing code and a Python table
 * that share some of its words.
 */

/** The file a question about Kepler's equation should find first. */
export const KEPLER = `/** Solves Kepler's equation M = E - e sin E for the eccentric anomaly, by Newton iteration. */
export function solveKeplerEquation(meanAnomaly: number, eccentricity: number): number {
  let anomaly = meanAnomaly;
  for (let i = 0; i < 50; i++) {
    const delta = (anomaly - eccentricity * Math.sin(anomaly) - meanAnomaly) / (1 - eccentricity * Math.cos(anomaly));
    anomaly -= delta;
    if (Math.abs(delta) < 1e-12) break;
  }
  return anomaly;
}
`;

/** The workspace: `KEPLER` at `src/orbit/kepler.ts`, and the files that compete with it. */
export const ORBIT_FILES: Record<string, string> = {
  "src/orbit/kepler.ts": KEPLER,
  "src/billing/invoice.ts": `/** The total of an invoice: line amounts plus tax, rounded to cents. */
export function computeInvoiceTotal(lines: { amount: number }[], taxRate: number): number {
  const net = lines.reduce((sum, line) => sum + line.amount, 0);
  return Math.round(net * (1 + taxRate) * 100) / 100;
}
`,
  "src/billing/refunds.ts": `/** Refunds a paid invoice to the customer's card. */
export async function issueRefund(invoiceId: string, reason: string): Promise<void> {
  await fetch(\`/refunds/\${invoiceId}\`, { method: "POST", body: reason });
}
`,
  "tools/kepler_table.py": `def print_kepler_table(eccentricity):
    """Prints the eccentric anomaly for each mean anomaly, solving Kepler's equation."""
    for mean_anomaly in range(0, 360, 10):
        print(mean_anomaly, eccentricity)
`,
};
