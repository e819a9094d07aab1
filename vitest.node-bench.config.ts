import { BENCH_SMOKE, nodeProject } from "./vitest.node.config.js";

/** The benchmarks' smoke runs, after everything else, two files at a time. */
export default nodeProject("node-bench", { include: BENCH_SMOKE, maxWorkers: 2, groupOrder: 3 });
