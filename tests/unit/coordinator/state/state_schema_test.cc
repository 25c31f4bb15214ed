// The state database's schema is checked at every start against the one
// declaration (state_schema.h), on hand-built SQLite files: a table with
// wrong, missing or unknown columns, a dropped table, a foreign table and a
// newer schema version are refused with one line naming the table and column,
// and nothing in the file is changed; a brand-new file is created at this
// version; a first-release database (user_version 0) migrates and is then
// recorded at this version.
#include "coordinator/state/state_schema.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>
#include <vector>

#include "coordinator/state/state_store.h"
#include "tests/unit/coordinator/coordinator_test_util.h"
#include "tests/unit/coordinator/state/older_database.h"

namespace shardd::testing {
namespace {

class StateSchemaTest : public ScratchTest {
 protected:
  std::string DbPath() const { return Path("state") + "/shardd.db"; }
  // Runs sql on the database file directly (as a careless operator would).
  void Sql(const std::string& sql) { RunSqlOnDatabase(Path("state"), sql); }
  // One text value (or "" when no row).
  std::string Query(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(DbPath().c_str(), &db), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
      const unsigned char* p = sqlite3_column_text(s, 0);
      out = p ? reinterpret_cast<const char*>(p) : "";
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
  }
  // A database as this shardd creates it, closed.
  void CreateCurrent() {
    auto s = StateStore::Open(Path("state"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  // Open must refuse, with one line holding every piece of `names`.
  void ExpectRefused(const std::vector<std::string>& names) {
    auto s = StateStore::Open(Path("state"));
    ASSERT_FALSE(s.ok()) << "opened a database that is not this schema";
    const std::string msg = s.status().message();
    EXPECT_EQ(s.status().code(), shard::StatusCode::kFailedPrecondition) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "more than one line: " << msg;
    EXPECT_TRUE(Contains(msg, DbPath())) << msg;
    for (const std::string& n : names) EXPECT_TRUE(Contains(msg, n)) << "lacks '" << n << "': " << msg;
  }
  std::string Columns(const std::string& table) {
    return Query("SELECT group_concat(name, ',') FROM pragma_table_info('" + table + "')");
  }
};

TEST_F(StateSchemaTest, ABrandNewDatabaseIsCreatedAtThisVersion) {
  CreateCurrent();
  EXPECT_EQ(Query("PRAGMA user_version"), std::to_string(state_schema::Version()));
  EXPECT_EQ(Query("SELECT count(*) FROM sqlite_master WHERE type='table'"), "6");
  CreateCurrent();  // and opens again as it is
}

// Regression (issue 39): a checkpoints table with other columns passed the
// start (and gained the tier column); every commit then failed to be recorded.
TEST_F(StateSchemaTest, ACheckpointsTableWithWrongColumnsIsRefusedAndNotAltered) {
  CreateCurrent();
  Sql("DROP TABLE checkpoints; CREATE TABLE checkpoints(job_id TEXT NOT NULL, step INTEGER NOT NULL, "
      "path TEXT NOT NULL, PRIMARY KEY(job_id, step)); PRAGMA user_version = 0;");
  ExpectRefused({"table checkpoints lacks its column world (INTEGER NOT NULL)"});
  EXPECT_EQ(Columns("checkpoints"), "job_id,step,path") << "the refused table was altered";
  EXPECT_EQ(Query("PRAGMA user_version"), "0");
}

TEST_F(StateSchemaTest, AColumnOfAnotherTypeIsRefused) {
  CreateCurrent();
  Sql("DROP TABLE checkpoints; CREATE TABLE checkpoints(job_id TEXT NOT NULL, step TEXT NOT NULL, "
      "world INTEGER NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL, path TEXT NOT NULL, "
      "committed_ms INTEGER NOT NULL, tier TEXT NOT NULL DEFAULT 'disk', PRIMARY KEY(job_id, step));");
  ExpectRefused({"table checkpoints column step is TEXT NOT NULL (in the primary key), not INTEGER NOT NULL"});
}

TEST_F(StateSchemaTest, AnUnknownColumnIsRefused) {
  CreateCurrent();
  Sql("ALTER TABLE events ADD COLUMN extra TEXT");
  ExpectRefused({"table events has a column extra shardd does not know"});
}

// Regression (issue 39): a dropped events table was recreated silently.
TEST_F(StateSchemaTest, ADroppedEventsTableIsRefusedNotRecreated) {
  CreateCurrent();
  Sql("DROP TABLE events");
  ExpectRefused({"table events is missing"});
  EXPECT_EQ(Query("SELECT count(*) FROM sqlite_master WHERE name='events'"), "0") << "recreated";
}

TEST_F(StateSchemaTest, ANewerSchemaVersionIsRefused) {
  CreateCurrent();
  const int newer = state_schema::Version() + 1;
  Sql("PRAGMA user_version = " + std::to_string(newer));
  ExpectRefused({"schema version " + std::to_string(newer) + ", newer than this shardd's " +
                 std::to_string(state_schema::Version())});
}

TEST_F(StateSchemaTest, AnotherProgramsDatabaseIsRefused) {
  Sql("CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT)");
  ExpectRefused({"table accounts is not one of shardd's"});
  EXPECT_EQ(Query("SELECT count(*) FROM sqlite_master WHERE name='jobs'"), "0") << "wrote shardd's tables into it";
}

// A first-release database (no user_version yet, no job_resources table, none
// of the columns added since) migrates, keeps its rows and is recorded at
// this version; a table this version added is created, not refused.
TEST_F(StateSchemaTest, AFirstReleaseDatabaseMigrates) {
  Sql(std::string(kFirstReleaseJobs) + kFirstReleaseOthers + kFirstReleaseMetrics + R"sql(
    INSERT INTO checkpoints VALUES(CAST('old-1' AS BLOB), 20, 2, 2, 200, '/ckpt/step_20', 1700000000000);
  )sql");
  {
    auto s = StateStore::Open(Path("state"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto c = (*s)->LoadCheckpoints("old-1");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->size(), 1u);
    EXPECT_EQ((*c)[0].step, 20);
    EXPECT_EQ((*c)[0].tier, "disk") << "the added column's default";
    EXPECT_TRUE((*s)->PutResources({"old-1", "cpu:1", ""}).ok()) << "job_resources was not created";
  }
  EXPECT_EQ(Query("PRAGMA user_version"), std::to_string(state_schema::Version()));
  EXPECT_TRUE(Contains(Columns("checkpoints"), ",tier")) << Columns("checkpoints");
  // From now on the file is at this version: a part dropped from it is refused.
  Sql("DROP TABLE job_resources");
  ExpectRefused({"table job_resources is missing"});
}

}  // namespace
}  // namespace shardd::testing
