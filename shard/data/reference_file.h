// The stored reference log-probs of a preference: job's pairs
// (<prepared prefix>.ref-<key>.f64; shard/train/preference_training.cc
// computes and checks them): magic "SHDREF01", u64 count, count doubles, u64
// xxh64 of the doubles (little-endian). Encoding and decoding are pure
// functions over bytes (tests/fuzz/fuzz_reference_file.cc); reading opens
// the file as a regular file of exactly the expected size, without
// following a link, so neither a FIFO nor a link nor an oversized file is
// ever waited on or read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shard/common/status.h"

namespace shard {

// The bytes of a file of `count` values.
uint64_t ReferenceFileSize(uint64_t count);

std::string EncodeReferenceFile(const std::vector<double>& values);

// DATA_LOSS naming `path` when `bytes` are not a whole reference of `count`
// values (size, magic, count or checksum).
StatusOr<std::vector<double>> DecodeReferenceFile(std::string_view bytes, uint64_t count, const std::string& path);

// Reads and decodes the file at `path`: a regular file of exactly
// ReferenceFileSize(count) bytes, not a symbolic link. NOT_FOUND when absent.
StatusOr<std::vector<double>> ReadReferenceFile(const std::string& path, uint64_t count);

}  // namespace shard
