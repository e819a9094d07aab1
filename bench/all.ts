/** `npm run bench`: every benchmark at its full size, one after another. */
import { report, runAuthCacheBench } from "./auth-cache.js";
import { reportCliStartup, runCliStartup } from "./cli-startup.js";
import { reportEditSearchable, runEditSearchable } from "./edit-searchable.js";
import { runGatewayBenchmarks } from "./gateway-run.js";
import { reportThroughput, runIndexThroughput } from "./index-throughput.js";
import { reportLimitsOverhead, runLimitsOverhead } from "./limits-overhead.js";
import { reportScan, runScanBench } from "./scan.js";
import { reportSyncCost, runSyncCost } from "./sync-cost.js";
import { reportTeammateClone, runTeammateClone } from "./teammate-clone.js";
import { reportWatch, runWatchLatency } from "./watch-latency.js";

console.log(report(await runAuthCacheBench(Number(process.env.BENCH_REQUESTS ?? 2000))), "\n");
const files = Number(process.env.BENCH_FILES ?? 100_000);
console.log(reportScan(await runScanBench(files)), "\n");
console.log(reportSyncCost(await runSyncCost(files, [0, 1, 10, 1000]), files), "\n");
console.log(reportWatch(await runWatchLatency(Number(process.env.BENCH_WATCH_FILES ?? 10_000), 30)), "\n");
const codeFiles = Number(process.env.BENCH_CODE_FILES ?? 10_000);
console.log(reportThroughput(await runIndexThroughput(codeFiles)), "\n");
console.log(reportTeammateClone(await runTeammateClone(codeFiles)), "\n");
console.log(reportEditSearchable(await runEditSearchable(Number(process.env.BENCH_EDIT_FILES ?? 2000), 30)));
console.log();
await runGatewayBenchmarks();
console.log();
console.log(reportLimitsOverhead(await runLimitsOverhead()));
console.log();
console.log(reportCliStartup(await runCliStartup(Number(process.env.BENCH_CLI_RUNS ?? 20))));
