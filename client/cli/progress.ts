import { SingleBar, Presets } from "cli-progress";

export interface Progress {
  update(phase: string, done: number, total?: number): void;
  stop(): void;
}

const silent: Progress = { update() {}, stop() {} };

/**
 * One bar per phase on stderr, only for a terminal and never with --json, so piped output stays
 * clean. A phase without a total (the scan) shows a running count.
 */
export function progress(enabled: boolean): Progress {
  if (!enabled || !process.stderr.isTTY) return silent;
  let bar: SingleBar | undefined;
  let current = "";
  const started = Date.now();
  return {
    update(phase, done, total) {
      // Bars appear only for work that takes longer than a second.
      if (Date.now() - started < 1000 && !bar) return;
      if (phase !== current) {
        bar?.stop();
        current = phase;
        bar = new SingleBar(
          {
            stream: process.stderr,
            format:
              total === undefined ? `${phase.padEnd(9)} {value} files` : `${phase.padEnd(9)} [{bar}] {value}/{total}`,
            hideCursor: true,
            clearOnComplete: false,
          },
          Presets.shades_classic,
        );
        bar.start(total ?? 0, done);
      }
      if (total !== undefined) bar!.setTotal(total);
      bar!.update(done);
    },
    stop() {
      bar?.stop();
    },
  };
}
