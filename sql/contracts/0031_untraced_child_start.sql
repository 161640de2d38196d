-- Contract 0031: the start of children without a trace context, which the workers of releases
-- built for schema 30 call (migration 0031 added the signature that carries one). Applied by
-- `wfctl init` once no live worker of such a release remains.

DROP FUNCTION wfctl_start_children_step(uuid, bigint, integer, integer, text, text, jsonb[], text[], integer,
                                        float8, text, boolean, timestamptz);
