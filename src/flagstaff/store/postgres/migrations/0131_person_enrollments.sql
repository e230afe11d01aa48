-- Early access enrollments (issue 27): the persons whose property
-- "$feature_enrollment/<flag key>" is true (or "true"), one row per flag key and person, so a
-- feature's enrolled persons are counted and listed from an index instead of a scan of the
-- project's persons. Ingestion rewrites a person's rows in the batch's transaction (its
-- person locked) when the batch sets or unsets such a property or merges the person
-- (store/postgres/ingest.py).
CREATE TABLE person_enrollments (
    project_id bigint NOT NULL,
    flag_key text COLLATE "C" NOT NULL,
    person_id bigint NOT NULL,
    PRIMARY KEY (project_id, flag_key, person_id)
);

CREATE INDEX person_enrollments_person ON person_enrollments (person_id);

-- The persons enrolled before this migration (the text search first: most persons have no
-- such property, and it is cheaper than reading each one's JSON).
INSERT INTO person_enrollments (project_id, flag_key, person_id)
SELECT p.project_id, substr(j.key, 21), p.id
FROM persons p CROSS JOIN LATERAL json_each(p.properties) AS j
WHERE strpos(p.properties::text, '"$feature_enrollment/') > 0
  AND left(j.key, 20) = '$feature_enrollment/'
  AND length(j.key) > 20
  AND j.value::text IN ('true', '"true"')
ON CONFLICT DO NOTHING;

-- Persons enrolled per flag key, kept by the triggers below as rows of person_enrollments
-- come and go (only an enrollment change writes those), so a list of features reads one row
-- each instead of counting index entries. Two ingest transactions enrolling persons in the
-- same feature take turns on its row (an opt-in is a person's click, not a stream).
CREATE TABLE enrollment_counts (
    project_id bigint NOT NULL,
    flag_key text COLLATE "C" NOT NULL,
    persons bigint NOT NULL,
    PRIMARY KEY (project_id, flag_key)
);

INSERT INTO enrollment_counts (project_id, flag_key, persons)
SELECT project_id, flag_key, count(*) FROM person_enrollments GROUP BY project_id, flag_key;

CREATE FUNCTION person_enrollments_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO enrollment_counts (project_id, flag_key, persons)
        VALUES (NEW.project_id, NEW.flag_key, 1)
        ON CONFLICT (project_id, flag_key)
        DO UPDATE SET persons = enrollment_counts.persons + 1;
        RETURN NEW;
    END IF;
    UPDATE enrollment_counts SET persons = persons - 1
    WHERE project_id = OLD.project_id AND flag_key = OLD.flag_key;
    RETURN OLD;
END;
$$;

CREATE TRIGGER person_enrollments_counted AFTER INSERT OR DELETE ON person_enrollments
FOR EACH ROW EXECUTE FUNCTION person_enrollments_count();
