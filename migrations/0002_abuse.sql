CREATE TABLE `abuse_throttles` (
	`id` text PRIMARY KEY NOT NULL,
	`kind` text NOT NULL,
	`subject` text NOT NULL,
	`org_id` text,
	`signal` text NOT NULL,
	`observed` integer NOT NULL,
	`threshold` integer NOT NULL,
	`reason` text NOT NULL,
	`created_at` integer DEFAULT (unixepoch('subsec') * 1000) NOT NULL,
	`expires_at` integer NOT NULL,
	`lifted_at` integer,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `abuse_throttles_subject_idx` ON `abuse_throttles` (`kind`,`subject`);--> statement-breakpoint
CREATE INDEX `abuse_throttles_expires_idx` ON `abuse_throttles` (`expires_at`);