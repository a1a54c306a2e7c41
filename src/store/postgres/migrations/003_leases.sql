-- 003: job leases (src/store/leases.ts): which process runs an in-flight job, until when.
CREATE TABLE leases (key text COLLATE "C" PRIMARY KEY, value json NOT NULL);
