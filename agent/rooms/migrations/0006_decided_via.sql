-- decided_via: the channel the owner decided a proposal through, as the
-- local API names it (app, cli); '' on the review page and the CLI on the
-- store. The daemon tells local apps of a decision without one; the local
-- API told them of its own when it decided.
ALTER TABLE proposals ADD COLUMN decided_via TEXT NOT NULL DEFAULT '';
