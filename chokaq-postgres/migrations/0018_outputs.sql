-- chokaq PostgreSQL schema, version 18: job outputs (issue 41, docs/outputs.md).
--
-- What a handler recorded (JobContext::record_output), on the job's own row in each table:
-- record_output writes it on the hot row under the lease's guard, and every statement that
-- moves a row (complete, complete_and_claim, fail, cancel, release, rescue, requeue) copies
-- it. Nullable, no default: adding it rewrites no row, and a job that records nothing stores
-- nothing. No index: it is read by id only.
ALTER TABLE {schema}.jobs_hot ADD COLUMN IF NOT EXISTS output jsonb NULL;
ALTER TABLE {schema}.jobs_archive ADD COLUMN IF NOT EXISTS output jsonb NULL;
ALTER TABLE {schema}.jobs_dlq ADD COLUMN IF NOT EXISTS output jsonb NULL;
