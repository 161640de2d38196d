-- wfctl schema, version 20: wfctl_submit and wfctl_send refuse the JSON values that wfctl's
-- library and CLI refuse.
--
-- Whoever may call the two functions may store any jsonb: an integer of 5,000 digits, arrays
-- nested 5,000 deep, a value of 100 MB. Python reads an integer of at most 4,300 digits
-- (sys.get_int_max_str_digits()) and nesting to about 1,000 levels; wfctl.submit, wfctl.send and
-- their commands refuse more than 500 levels, integers of more than 4,300 digits and more than
-- 1,000,000 bytes of JSON (wfctl/validate.py), and so do these functions now, raising SQLSTATE
-- 22023 (invalid_parameter_value) with a message that names the limit passed:
--
--   wfctl_check_value(value, what)  the check: NULL passes; a value of more than 1,000,000
--                                   bytes as compact JSON text (jsonb writes ", " and ": "
--                                   between items: they count one byte each), an array or
--                                   object nested more than 500 deep, or a number stored as an
--                                   integer of more than 4,300 digits (jsonb writes a number
--                                   without a fraction as an integer: 1e5000 is 1 and 5,000
--                                   zeros) is refused; ``what`` starts the message.
--   wfctl_submit(...)                checks its input ('workflow input');
--   wfctl_send(...)                  checks its payload ('message payload').
--
-- A worker reads whatever it finds (a value stored with plain SQL, or before this version)
-- without failing anything but the run that holds it (wfctl/storedjson.py).

CREATE FUNCTION wfctl_check_value(p_value jsonb, p_what text) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    text_size bigint;
    size bigint;
    big text;
BEGIN
    IF p_value IS NULL THEN
        RETURN;
    END IF;
    -- compact JSON is at least two thirds of jsonb's text (the shortest item with a separator,
    -- "1, ", loses one byte of three): only a text between 1,000,000 and 1,500,000 bytes needs
    -- its separators' spaces counted out
    text_size := octet_length(p_value::text);
    IF text_size > 1000000 AND text_size <= 1500000 THEN
        size := octet_length(regexp_replace(p_value::text, '("(?:[^"\\]|\\.)*")|([,:]) ', '\1\2', 'g'));
        IF size > 1000000 THEN
            RAISE EXCEPTION '% is % bytes, over the limit of 1000000 bytes', p_what, size
                USING ERRCODE = '22023';
        END IF;
    ELSIF text_size > 1500000 THEN
        RAISE EXCEPTION '% is more than % bytes, over the limit of 1000000 bytes', p_what,
            text_size * 2 / 3 USING ERRCODE = '22023';
    END IF;
    IF text_size < 1002 THEN
        RETURN;  -- too short to nest 501 deep (501 brackets open, 501 close) or to hold 4,301 digits
    END IF;
    -- an item at level 500 that is an array or an object is a container 501 deep
    IF jsonb_path_exists(p_value, 'strict $.**{500} ? (@.type() == "array" || @.type() == "object")') THEN
        RAISE EXCEPTION '% is nested more than 500 levels deep (the limit)', p_what
            USING ERRCODE = '22023';
    END IF;
    SELECT n::text INTO big
    FROM jsonb_path_query(p_value, 'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))') AS n
    WHERE position('.' IN n::text) = 0
    LIMIT 1;
    IF big IS NOT NULL THEN
        RAISE EXCEPTION '% holds an integer of % digits, more than the 4300 that Python reads', p_what,
            length(ltrim(big, '-')) USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Submit from any language (0001, 0010), its input checked.
CREATE OR REPLACE FUNCTION wfctl_submit(
    p_workflow_type text,
    p_input jsonb DEFAULT NULL,
    p_key text DEFAULT NULL,
    p_delay interval DEFAULT NULL,
    p_priority integer DEFAULT 0,
    p_max_retries integer DEFAULT NULL
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    new_id uuid;
BEGIN
    PERFORM wfctl_check_value(p_input, 'workflow input');
    LOOP
        INSERT INTO workflows (workflow_type, input_data, idempotency_key, run_at, priority,
                               max_retries)
        VALUES (p_workflow_type, p_input, p_key, now() + coalesce(p_delay, interval '0'),
                coalesce(p_priority, 0), p_max_retries)
        ON CONFLICT DO NOTHING
        RETURNING id INTO new_id;
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        SELECT id INTO new_id FROM workflows WHERE idempotency_key = p_key;
        IF new_id IS NOT NULL THEN
            RETURN new_id;
        END IF;
        -- the conflicting row was deleted between the two statements: try again
    END LOOP;
END;
$$;

-- Send a message from any language (0006), its payload checked. Refused: an unknown workflow
-- (SQLSTATE P0002), a finished one (55000), a bad topic, key or payload (22023).
CREATE OR REPLACE FUNCTION wfctl_send(
    p_id uuid,
    p_topic text,
    p_payload jsonb DEFAULT NULL,
    p_key text DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    found_status text;
    message_id bigint;
BEGIN
    IF p_topic IS NULL OR char_length(p_topic) NOT BETWEEN 1 AND 150 THEN
        RAISE EXCEPTION 'a message topic must have 1 to 150 characters' USING ERRCODE = '22023';
    END IF;
    IF p_key IS NOT NULL AND char_length(p_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a message key must have 1 to 200 characters' USING ERRCODE = '22023';
    END IF;
    PERFORM wfctl_check_value(p_payload, 'message payload');
    IF p_key IS NOT NULL THEN
        SELECT id INTO message_id FROM workflow_messages
        WHERE workflow_id = p_id AND idempotency_key = p_key;
        IF message_id IS NOT NULL THEN
            RETURN message_id;
        END IF;
    END IF;
    SELECT status INTO found_status FROM workflows WHERE id = p_id;
    IF found_status IS NULL THEN
        RAISE EXCEPTION 'no workflow %', p_id USING ERRCODE = 'P0002';
    END IF;
    IF found_status IN ('completed', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'workflow % is %: it takes no more messages', p_id, found_status
            USING ERRCODE = '55000';
    END IF;
    INSERT INTO workflow_messages (workflow_id, topic, payload, idempotency_key)
    VALUES (p_id, p_topic, p_payload, p_key)
    ON CONFLICT (workflow_id, idempotency_key) DO NOTHING
    RETURNING id INTO message_id;
    IF message_id IS NULL THEN  -- a concurrent send with the same key won
        SELECT id INTO message_id FROM workflow_messages
        WHERE workflow_id = p_id AND idempotency_key = p_key;
    END IF;
    RETURN message_id;
END;
$$;

-- Pin the functions to this schema, as migrations 0003, 0006 and 0010 do (CREATE OR REPLACE
-- resets a function's settings).
DO $migration$
DECLARE
    here text := current_schema();
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY[
        'wfctl_check_value(jsonb, text)',
        'wfctl_submit(text, jsonb, text, interval, integer, integer)',
        'wfctl_send(uuid, text, jsonb, text)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_temp', here, fn, here);
    END LOOP;
END
$migration$;
