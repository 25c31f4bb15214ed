#include "coordinator/state/state_schema.h"

#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <vector>

#include "shard/common/logging.h"
#include "shard/spec/step_metric_fields.h"

namespace shardd::state_schema {
namespace {

// added_in: 0 = in the table's first release (every database of this project
// has it); k >= 1 = added by schema version k (a database older than k may
// lack it and gains it on open). Version 1 is the first recorded version: a
// database with user_version 0 predates it and may lack any k >= 1 part.
struct Column {
  const char* name;
  const char* decl;  // "TYPE [NOT NULL] [DEFAULT ...] [PRIMARY KEY]"
  int added_in = 0;
};
struct Table {
  const char* name;
  std::vector<Column> columns;
  const char* primary_key;  // the composite key's columns ("" = a column's own PRIMARY KEY)
  int added_in = 0;
};

// The metrics table gains a column per optional figure of the step-metric
// table, so a figure is declared once (its row names its schema version).
std::vector<Table> WithFigureColumns(std::vector<Table> tables) {
  for (Table& t : tables) {
    if (std::string(t.name) != "metrics") continue;
    for (const shard::StepMetricField& f : shard::StepMetricFields())
      t.columns.push_back({f.name.data(), "REAL", f.store_since});  // the table's names are literals: NUL-ended
  }
  return tables;
}

const std::vector<Table>& Tables() {
  static const std::vector<Table> tables = WithFigureColumns({
      {"jobs",
       {{"id", "TEXT PRIMARY KEY"}, {"name", "TEXT NOT NULL"}, {"state", "INTEGER NOT NULL"},
        {"attempt", "INTEGER NOT NULL"}, {"restarts", "INTEGER NOT NULL"}, {"reason", "TEXT NOT NULL"},
        {"spec", "BLOB NOT NULL"}, {"progress", "BLOB NOT NULL"}, {"worker_token", "TEXT NOT NULL"},
        {"created_ms", "INTEGER NOT NULL"}, {"updated_ms", "INTEGER NOT NULL"}, {"seq", "INTEGER NOT NULL"},
        {"number", "INTEGER NOT NULL"},
        {"join_token", "TEXT NOT NULL DEFAULT ''", 1},  // external jobs
        {"stall", "BLOB NOT NULL DEFAULT ''", 1},       // the flight recorder's account (JobStatus.stall)
        // The memory tier's job folder ('' in an older database: the job keeps
        // the name-and-workdir folder of that version) and whether the ended
        // job's folder was removed (0: an ended job's is removed once more, at most).
        {"memory_dir", "TEXT NOT NULL DEFAULT ''", 1},
        {"memory_tier_removed", "INTEGER NOT NULL DEFAULT 0", 1}},
       ""},
      {"workers",
       {{"job_id", "TEXT NOT NULL"}, {"attempt", "INTEGER NOT NULL"}, {"rank", "INTEGER NOT NULL"},
        {"pid", "INTEGER NOT NULL"}, {"hostname", "TEXT NOT NULL"}, {"state", "TEXT NOT NULL"}},
       "job_id, attempt, rank"},
      {"events",
       {{"job_id", "TEXT NOT NULL"}, {"seq", "INTEGER NOT NULL"}, {"unix_ms", "INTEGER NOT NULL"},
        {"attempt", "INTEGER NOT NULL"}, {"kind", "TEXT NOT NULL"}, {"message", "TEXT NOT NULL"},
        {"state", "INTEGER NOT NULL"}},
       "job_id, seq"},
      {"checkpoints",
       {{"job_id", "TEXT NOT NULL"}, {"step", "INTEGER NOT NULL"}, {"world", "INTEGER NOT NULL"},
        {"files", "INTEGER NOT NULL"}, {"bytes", "INTEGER NOT NULL"}, {"path", "TEXT NOT NULL"},
        {"committed_ms", "INTEGER NOT NULL"},
        {"tier", "TEXT NOT NULL DEFAULT 'disk'", 1}},  // checkpoint.memory: disk | memory
       "job_id, step"},
      {"metrics",
       {{"job_id", "TEXT NOT NULL"}, {"step", "INTEGER NOT NULL"}, {"attempt", "INTEGER NOT NULL"},
        {"loss", "REAL"}, {"lr", "REAL"}, {"grad_norm", "REAL"}, {"tokens", "INTEGER"}, {"seconds", "REAL"},
        {"skipped", "INTEGER NOT NULL DEFAULT 0", 1},             // the loss scaler's verdict per step
        {"loss_scale", "REAL NOT NULL DEFAULT 0", 1},             // 0: not reported
        {"eval_samples", "INTEGER NOT NULL DEFAULT 0", 1},        // held-out evaluation (0: none)
        {"eval_loss", "REAL", 1},
        {"eval_exact_match", "REAL NOT NULL DEFAULT -1", 1},      // -1: not computed
        {"pairs", "INTEGER NOT NULL DEFAULT 0", 1},               // a preference: step's pairs (0: not one)
        {"eval_pairs", "INTEGER NOT NULL DEFAULT 0", 1},          // eval: on held-out pairs (0: none)
        {"moe_experts", "INTEGER NOT NULL DEFAULT 0", 2},         // a sparse model's experts per layer
        {"expert_load", "BLOB NOT NULL DEFAULT ''", 2}},          // per layer and expert: doubles (see StepMetrics)
       // then one REAL column per optional figure, named as in
       // shard/spec/step_metric_fields.cc (added in its store_since): WithFigureColumns
       "job_id, step"},
      // The local scheduler's demand and placement per job (coordinator/sched).
      {"job_resources",
       {{"job_id", "TEXT PRIMARY KEY"}, {"demand", "TEXT NOT NULL"}, {"placement", "TEXT NOT NULL"}},
       "",
       1},
  });
  return tables;
}

// What PRAGMA table_info says of a column, and what a declaration means.
struct Shape {
  std::string type;  // upper case
  bool not_null = false;
  bool primary_key = false;
  bool operator==(const Shape& o) const {
    return type == o.type && not_null == o.not_null && primary_key == o.primary_key;
  }
};

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool InPrimaryKey(const Table& t, const std::string& column) {
  const std::string key = std::string(", ") + t.primary_key + ",";
  return key.find(" " + column + ",") != std::string::npos;
}

Shape Declared(const Table& t, const Column& c) {
  const std::string decl = Upper(c.decl);
  Shape s;
  s.type = decl.substr(0, decl.find(' '));
  s.not_null = decl.find("NOT NULL") != std::string::npos;
  s.primary_key = decl.find("PRIMARY KEY") != std::string::npos || InPrimaryKey(t, c.name);
  return s;
}

std::string Describe(const Shape& s) {
  return s.type + (s.not_null ? " NOT NULL" : "") + (s.primary_key ? " (in the primary key)" : "");
}

std::string CreateStatement(const Table& t) {
  std::string sql = std::string("CREATE TABLE ") + t.name + "(";
  for (size_t i = 0; i < t.columns.size(); ++i)
    sql += (i ? ", " : "") + std::string(t.columns[i].name) + " " + t.columns[i].decl;
  if (*t.primary_key) sql += std::string(", PRIMARY KEY(") + t.primary_key + ")";
  return sql + ");";
}

shard::Status Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return shard::OkStatus();
  std::string msg = err ? err : "unknown error";
  sqlite3_free(err);
  return shard::Internal(msg + " (" + sql.substr(0, 80) + ")");
}

// Rows of a query of text columns (names and types are text here).
shard::StatusOr<std::vector<std::vector<std::string>>> Rows(sqlite3* db, const std::string& sql, int columns) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(db);
    sqlite3_finalize(s);
    return shard::Internal(msg);
  }
  std::vector<std::vector<std::string>> rows;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int i = 0; i < columns; ++i) {
      const unsigned char* p = sqlite3_column_text(s, i);
      row.push_back(p ? reinterpret_cast<const char*>(p) : "");
    }
    rows.push_back(std::move(row));
  }
  std::string msg = sqlite3_errmsg(db);
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) return shard::Internal(msg);
  return rows;
}

shard::StatusOr<int> UserVersion(sqlite3* db) {
  ASSIGN_OR_RETURN(auto rows, Rows(db, "PRAGMA user_version", 1));
  return rows.empty() ? 0 : std::atoi(rows[0][0].c_str());
}

// The changes that bring an older database to this version, once every check
// passed: nothing is altered in a database that is then refused.
struct Plan {
  std::vector<std::string> statements;
};

struct Checker {
  sqlite3* db;
  std::string path;
  int version;  // the database's

  shard::Status Refuse(const std::string& what) const {
    return shard::FailedPrecondition("state database " + path + " (schema version " + std::to_string(version) +
                                     "): " + what + "; this is not the schema shardd " +
                                     std::to_string(Version()) + " keeps, so it will not serve it (restore " + path +
                                     ".bak or move the file away)");
  }

  shard::Status CheckTable(const Table& t, Plan* plan) const {
    ASSIGN_OR_RETURN(auto rows, Rows(db, std::string("SELECT name, type, \"notnull\", pk FROM pragma_table_info('") +
                                             t.name + "')", 4));
    std::map<std::string, Shape> have;
    for (const auto& r : rows) have[r[0]] = Shape{Upper(r[1]), r[2] == "1", r[3] != "0"};
    for (const auto& [name, shape] : have) {
      const bool known = std::any_of(t.columns.begin(), t.columns.end(),
                                     [&](const Column& c) { return name == c.name; });
      if (!known) return Refuse(std::string("table ") + t.name + " has a column " + name + " shardd does not know");
    }
    for (const Column& c : t.columns) {
      const Shape want = Declared(t, c);
      auto it = have.find(c.name);
      if (it == have.end()) {
        if (c.added_in <= version)
          return Refuse(std::string("table ") + t.name + " lacks its column " + c.name + " (" + Describe(want) + ")");
        plan->statements.push_back(std::string("ALTER TABLE ") + t.name + " ADD COLUMN " + c.name + " " + c.decl);
        continue;
      }
      if (!(it->second == want))
        return Refuse(std::string("table ") + t.name + " column " + c.name + " is " + Describe(it->second) +
                      ", not " + Describe(want));
    }
    return shard::OkStatus();
  }
};

}  // namespace

int Version() {
  int v = 1;
  for (const Table& t : Tables()) {
    v = std::max(v, t.added_in);
    for (const Column& c : t.columns) v = std::max(v, c.added_in);
  }
  return v;
}

shard::Status Apply(sqlite3* db, const std::string& path) {
  ASSIGN_OR_RETURN(const int version, UserVersion(db));
  if (version > Version())
    return shard::FailedPrecondition("state database " + path + " has schema version " + std::to_string(version) +
                                     ", newer than this shardd's " + std::to_string(Version()) +
                                     "; run the shardd that wrote it (or a newer one)");
  ASSIGN_OR_RETURN(auto rows, Rows(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'", 1));
  std::set<std::string> present;
  for (const auto& r : rows) present.insert(r[0]);
  Plan plan;
  if (present.empty()) {
    for (const Table& t : Tables()) plan.statements.push_back(CreateStatement(t));
  } else {
    const Checker check{db, path, version};
    for (const std::string& name : present) {
      const bool known = std::any_of(Tables().begin(), Tables().end(), [&](const Table& t) { return name == t.name; });
      if (!known) return check.Refuse("table " + name + " is not one of shardd's");
    }
    for (const Table& t : Tables()) {
      if (present.count(t.name)) {
        RETURN_IF_ERROR(check.CheckTable(t, &plan));
      } else if (t.added_in > version) {
        plan.statements.push_back(CreateStatement(t));
      } else {
        return check.Refuse(std::string("table ") + t.name + " is missing (shardd never drops it)");
      }
    }
  }
  if (plan.statements.empty() && version == Version()) return shard::OkStatus();
  std::string sql = "BEGIN IMMEDIATE;";
  for (const std::string& s : plan.statements) sql += s + ";";
  sql += "PRAGMA user_version = " + std::to_string(Version()) + "; COMMIT;";
  if (shard::Status st = Exec(db, sql); !st.ok()) {
    (void)Exec(db, "ROLLBACK;");
    return shard::Internal("state database " + path + ": cannot bring it to schema version " +
                           std::to_string(Version()) + ": " + st.message());
  }
  if (!present.empty() && version < Version())
    LOG_INFO("state database {}: migrated from schema version {} to {} ({} change(s))", path, version, Version(),
             plan.statements.size());
  return shard::OkStatus();
}

}  // namespace shardd::state_schema
