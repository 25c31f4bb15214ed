// State databases as older versions of shardd left them, for the tests that
// open one: the first release's tables as it created them, and SQL run on
// the database file directly (as that version, or a careless operator, would).
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <string>

namespace shardd::testing {

// The first release's tables: the jobs table, the others but metrics (a
// database from an older version always has them; a missing one is refused,
// state_schema_test.cc), and its metrics table.
inline constexpr const char* kFirstReleaseJobs = R"sql(
  CREATE TABLE jobs(
    id TEXT PRIMARY KEY, name TEXT NOT NULL, state INTEGER NOT NULL, attempt INTEGER NOT NULL,
    restarts INTEGER NOT NULL, reason TEXT NOT NULL, spec BLOB NOT NULL, progress BLOB NOT NULL,
    worker_token TEXT NOT NULL, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL, number INTEGER NOT NULL);
)sql";
inline constexpr const char* kFirstReleaseOthers = R"sql(
  CREATE TABLE workers(
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, rank INTEGER NOT NULL, pid INTEGER NOT NULL,
    hostname TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY(job_id, attempt, rank));
  CREATE TABLE events(
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, unix_ms INTEGER NOT NULL, attempt INTEGER NOT NULL,
    kind TEXT NOT NULL, message TEXT NOT NULL, state INTEGER NOT NULL, PRIMARY KEY(job_id, seq));
  CREATE TABLE checkpoints(
    job_id TEXT NOT NULL, step INTEGER NOT NULL, world INTEGER NOT NULL, files INTEGER NOT NULL,
    bytes INTEGER NOT NULL, path TEXT NOT NULL, committed_ms INTEGER NOT NULL, PRIMARY KEY(job_id, step));
)sql";
inline constexpr const char* kFirstReleaseMetrics = R"sql(
  CREATE TABLE metrics(
    job_id TEXT NOT NULL, step INTEGER NOT NULL, attempt INTEGER NOT NULL, loss REAL, lr REAL,
    grad_norm REAL, tokens INTEGER, seconds REAL, PRIMARY KEY(job_id, step));
)sql";

// Runs sql on <state_dir>/shardd.db (created with its folder when missing),
// without shardd; fails the test naming SQLite's error.
inline void RunSqlOnDatabase(const std::string& state_dir, const std::string& sql) {
  std::filesystem::create_directories(state_dir);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((state_dir + "/shardd.db").c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << msg;
}

}  // namespace shardd::testing
