import { ALONE, nodeProject } from "./vitest.node.config.js";

/** `ALONE`'s files, after the Node tests and before the benchmarks' smoke runs, one at a time. */
export default nodeProject("node-alone", { include: ALONE, maxWorkers: 1, groupOrder: 2 });
