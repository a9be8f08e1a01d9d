-- announced_at: when the agent queued the proposal_decided event for the hub.
-- The review CLI and page decide in their own processes; the running agent
-- finds decisions not yet announced and tells the hub once.
ALTER TABLE proposals ADD COLUMN announced_at INTEGER;
CREATE INDEX proposals_unannounced ON proposals(state) WHERE announced_at IS NULL AND state != 'pending';
