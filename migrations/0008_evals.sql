CREATE TABLE `eval_runs` (
	`id` text PRIMARY KEY NOT NULL,
	`org_id` text NOT NULL,
	`taskset_id` text NOT NULL,
	`rollout_run_id` text NOT NULL,
	`agent` text NOT NULL,
	`model` text,
	`checkpoint` text,
	`attempts` integer NOT NULL,
	`concurrency` integer NOT NULL,
	`price_input` real,
	`price_output` real,
	`status` text DEFAULT 'running' NOT NULL,
	`created_at` integer DEFAULT (unixepoch('subsec') * 1000) NOT NULL,
	`ended_at` integer,
	`summary_json` text,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `eval_runs_org_created_idx` ON `eval_runs` (`org_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `eval_runs_taskset_idx` ON `eval_runs` (`org_id`,`taskset_id`,`agent`,`created_at`);