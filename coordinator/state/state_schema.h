// The tables of the state database, declared once (state_schema.cc): the
// CREATE statements of a new database, the migration of an older one and the
// check at every start all read the same declaration.
//
// The schema version (PRAGMA user_version) is the newest `added_in` of any
// table or column. A database is refused, with one line naming the table and
// column, when it is newer than this shardd, holds a table or column shardd
// does not know, lacks one it must have (a table dropped outside shardd is
// never silently recreated), or declares a column differently (type, NOT
// NULL, primary key). An older database gains what was added since, after
// every check passed. A brand-new (empty) database is created.
//
// Adding a column: append {name, declaration, added_in = Version() + 1} to its
// table in kTables (the declaration needs a DEFAULT, or must be nullable, so
// ALTER TABLE can add it to older rows); a new table: append it with that
// added_in. The version follows by itself.
#pragma once

#include <string>

#include "shard/common/status.h"

struct sqlite3;

namespace shardd::state_schema {

// This shardd's schema version (>= 1).
int Version();
// Creates, migrates or verifies the database `db` (at `path`, for messages).
// FAILED_PRECONDITION names the table and column of the first mismatch.
shard::Status Apply(sqlite3* db, const std::string& path);

}  // namespace shardd::state_schema
