// The admin token: created on the coordinator's first start as
// <state_dir>/admin.token (mode 0600, 48 hex characters from /dev/urandom) and
// required on every JobService call. shardctl reads it from the state dir or
// SHARDD_TOKEN. Worker tokens are per attempt and live in the JobManager.
#pragma once

#include <string>

#include "shard/common/status.h"

namespace shardd {

// Reads <state_dir>/admin.token, creating it first if absent. Refuses a token
// file readable by others.
shard::StatusOr<std::string> LoadOrCreateAdminToken(const std::string& state_dir);
// Reads the token without creating one (NOT_FOUND when absent).
shard::StatusOr<std::string> ReadAdminToken(const std::string& state_dir);
// `bytes` random bytes from /dev/urandom as hex (tokens).
shard::StatusOr<std::string> RandomHex(int bytes);
// Compares in time independent of where the strings differ.
bool TokensEqual(const std::string& a, const std::string& b);

// What the state database keeps of a worker token: "sha256:" + 64 hex digits.
// A token is 24 random bytes, so an unsalted hash cannot be reversed by search;
// a reader of the database learns nothing a worker call would accept.
std::string HashToken(const std::string& token);
bool IsTokenHash(const std::string& s);
// Whether `token` hashes to `hash`, in constant time (empty never matches).
bool TokenMatchesHash(const std::string& token, const std::string& hash);
// launcher: external. Every rank of an attempt shares one worker token, which a
// joining worker receives; derived from the join token and the attempt, it
// survives a coordinator restart without being stored (knowing it does not
// reveal the join token).
std::string ExternalWorkerToken(const std::string& join_token, int attempt);

}  // namespace shardd
