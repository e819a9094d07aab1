CREATE TABLE `task_sets` (
	`id` text PRIMARY KEY NOT NULL,
	`org_id` text NOT NULL,
	`user_id` text NOT NULL,
	`manifest` text NOT NULL,
	`tasks` integer NOT NULL,
	`created_at` integer DEFAULT (unixepoch('subsec') * 1000) NOT NULL,
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`user_id`) REFERENCES `users`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `task_sets_org_created_idx` ON `task_sets` (`org_id`,`created_at`);--> statement-breakpoint
ALTER TABLE `agent_tasks` ADD `kind` text DEFAULT 'agent' NOT NULL;