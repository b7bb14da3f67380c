-- Allocations and dead letters are pruned after AUDIT_RETENTION_S: index the column it reads.
CREATE INDEX allocations_committed_at ON allocations (committed_at);
CREATE INDEX dead_letters_created_at ON dead_letters (created_at);
