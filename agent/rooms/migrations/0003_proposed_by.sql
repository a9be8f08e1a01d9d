-- proposed_by: who sent the proposal, as the hub named the caller (an MCP
-- client token's name and id, or the admin API). Shown to the owner on
-- review; never used to decide anything.
ALTER TABLE proposals ADD COLUMN proposed_by TEXT NOT NULL DEFAULT '';
