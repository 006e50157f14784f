-- The rights block alone: answers 1 when the connection's ACL user may run every command the
-- verb will send (checked before the model runs for it). (no-writes)
return 1
