CREATE TABLE `usage_daily` (
	`day` text NOT NULL,
	`org_id` text NOT NULL,
	`user_id` text NOT NULL,
	`key_id` text NOT NULL,
	`model` text NOT NULL,
	`requests` integer DEFAULT 0 NOT NULL,
	`prompt_tokens` integer DEFAULT 0 NOT NULL,
	`completion_tokens` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`day`, `key_id`, `model`),
	FOREIGN KEY (`org_id`) REFERENCES `orgs`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `usage_daily_org_day_idx` ON `usage_daily` (`org_id`,`day`);