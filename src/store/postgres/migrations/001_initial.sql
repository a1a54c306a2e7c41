-- 001: the store's tables. One table per resource, keyed like the LMDB store (the record id, or for
-- `idx` the secondary index key `<index>|<part>|...|<id>`), the record as json. Keys sort by their bytes
-- (COLLATE "C"), as LMDB orders them, so index range scans walk the primary key's B-tree in order.
-- json, not jsonb: records hold user text, and jsonb refuses a string with U+0000 (which JSON, LMDB
-- and the API accept); the store never queries inside a record, so jsonb's operators are not needed.

CREATE TABLE meta (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE idx (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE users (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE teams (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE sessions (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE keys (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE accounts (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE usage (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE inferences (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE feedback (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE judges (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE examples (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE projects (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE deployments (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE training_jobs (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE datasets (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE dataset_versions (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE uploads (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE training_logs (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE checkpoints (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE evaluations (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE generation_jobs (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
CREATE TABLE adaptive_runs (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);

INSERT INTO meta (key, value) VALUES ('schema_version', '2');
