-- Partition bounds by the clock, not by the session's calendar.
--
-- wfctl_partition_start() finds an interval's start in seconds since the epoch, so partitions
-- of '1 day' start at midnight UTC whatever the session's TimeZone. The next bounds were found
-- by adding the interval to a timestamptz (`p_start + iv`, `first + k * iv`), which PostgreSQL
-- does in the session's TimeZone: across a change of summer time a day is 23 or 25 hours
-- there, so in a session whose TimeZone is, say, Europe/Berlin a partition was made an hour
-- short (leaving an hour to the default partition) and the next start was refused ("a
-- partition starts at the start of an interval"): `wfctl prune`, `wfctl db partition` and the
-- worker's duty failed on such days. wfctl_partition_step() adds whole intervals in seconds
-- since the epoch, as wfctl_partition_start() counts them, and the three functions that added
-- intervals use it. They are rewritten from pg_get_functiondef() (their settings and pinned
-- search_path kept), and the migration fails if a text it replaces is not found.
--
-- Both layouts: the functions exist in both; only a partitioned database calls them.

CREATE FUNCTION wfctl_partition_step(p_start timestamptz, p_count integer, p_interval interval)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN to_timestamp(extract(epoch FROM p_start) + p_count * extract(epoch FROM p_interval));

DO $migration$
DECLARE
    here text := current_schema();
    fn record;
    body text;
BEGIN
    FOR fn IN
        SELECT * FROM (VALUES
            ('wfctl_create_partition(timestamptz)',
             ARRAY['stop := p_start + iv;', 'stop := wfctl_partition_step(p_start, 1, iv);']),
            ('wfctl_ensure_partitions(integer)',
             ARRAY['(first + g.k * iv)', 'wfctl_partition_step(first, g.k, iv)',
                   'wfctl_create_partition(first + k * iv)', 'wfctl_create_partition(wfctl_partition_step(first, k, iv))']),
            ('wfctl_partition_convert(interval, integer)',
             ARRAY['wfctl_partition_start(wfctl_now(), p_interval) + p_ahead * p_interval',
                   'wfctl_partition_step(wfctl_partition_start(wfctl_now(), p_interval), p_ahead, p_interval)',
                   'first := first + p_interval;', 'first := wfctl_partition_step(first, 1, p_interval);'])
        ) AS t(signature, swaps)
    LOOP
        body := pg_get_functiondef(format('%I.%s', here, fn.signature)::regprocedure);
        FOR i IN 1 .. array_length(fn.swaps, 1) BY 2 LOOP
            IF strpos(body, fn.swaps[i]) = 0 THEN
                RAISE EXCEPTION 'migration 0023: % has no %', fn.signature, fn.swaps[i];
            END IF;
            body := replace(body, fn.swaps[i], fn.swaps[i + 1]);
        END LOOP;
        EXECUTE body;
    END LOOP;
END
$migration$;
